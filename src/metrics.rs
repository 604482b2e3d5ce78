//! What an operator graphs: the service's counters, gauges and histograms,
//! in Prometheus's text format (the `prometheus-client` crate). One
//! [`Metrics`] per service, filled by the layers that see each event (the
//! registry: sessions and pools; a session: commands, output, refusals;
//! the sandbox: engine calls; builds), read by [`Metrics::encode`].
//!
//! Labels take a few fixed values only (outcomes, reasons, engine
//! operations, stream names): no session id, path or command line is ever
//! a label, so the endpoint tells nothing of what sessions do and its size
//! stays bounded.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label set of one label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// How it ended.
    pub outcome: String,
}

/// By stable refusal reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// The reason callers get (`ErrorInfo.reason`).
    pub reason: String,
}

/// By output stream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Stream {
    /// `stdout` or `stderr`.
    pub stream: String,
}

/// By engine operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Op {
    /// The engine call, e.g. `start_container`.
    pub op: String,
}

/// By whether a session came from the warm pool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Pooled {
    /// `true` or `false`.
    pub pooled: String,
}

type Int = Gauge<i64, AtomicI64>;

fn seconds_histogram() -> Histogram {
    // 1 ms to about 9 minutes.
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// Every metric of one service.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Sessions open now (set when scraped).
    pub sessions_open: Int,
    /// Sessions created, by whether the pool served them.
    pub sessions_created: Family<Pooled, Counter>,
    /// Sessions brought back after a restart.
    pub sessions_recovered: Counter,
    /// Warm containers ready now (set when scraped).
    pub pool_ready: Int,
    /// Time from a CreateSession call to its answer.
    pub session_start_seconds: Histogram,
    /// Commands by outcome: exit, timed_out, oom, cancelled, refused.
    pub commands: Family<Outcome, Counter>,
    /// Wall time of the commands that ran.
    pub command_seconds: Histogram,
    /// Output bytes commands wrote, by stream.
    pub output_bytes: Family<Stream, Counter>,
    /// Output bytes the caps dropped, by stream.
    pub output_dropped_bytes: Family<Stream, Counter>,
    /// Refused calls, by reason.
    pub refusals: Family<Reason, Counter>,
    /// Engine calls that failed, by operation.
    pub engine_errors: Family<Op, Counter>,
    /// Time engine calls took, by operation.
    pub engine_call_seconds: Family<Op, Histogram>,
    /// Container removals being retried now (set when scraped).
    pub engine_pending_removals: Int,
    /// Environment builds by outcome: built, cached, failed.
    pub builds: Family<Outcome, Counter>,
    /// Calls and logins that gave a wrong token.
    pub auth_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `sandboxd` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sandboxd");
        let m = Metrics {
            sessions_open: Int::default(),
            sessions_created: Family::default(),
            sessions_recovered: Counter::default(),
            pool_ready: Int::default(),
            session_start_seconds: seconds_histogram(),
            commands: Family::default(),
            command_seconds: seconds_histogram(),
            output_bytes: Family::default(),
            output_dropped_bytes: Family::default(),
            refusals: Family::default(),
            engine_errors: Family::default(),
            engine_call_seconds: Family::new_with_constructor(seconds_histogram),
            engine_pending_removals: Int::default(),
            builds: Family::default(),
            auth_failures: Counter::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "sessions_open",
            "Sessions open now",
            m.sessions_open.clone(),
        );
        r.register(
            "sessions_created",
            "Sessions created, by whether the warm pool served them",
            m.sessions_created.clone(),
        );
        r.register(
            "sessions_recovered",
            "Sessions brought back after a restart",
            m.sessions_recovered.clone(),
        );
        r.register(
            "pool_ready",
            "Warm containers ready now",
            m.pool_ready.clone(),
        );
        r.register(
            "session_start_seconds",
            "Time from a CreateSession call to its answer",
            m.session_start_seconds.clone(),
        );
        r.register(
            "commands",
            "Commands by outcome (exit, timed_out, oom, cancelled, refused)",
            m.commands.clone(),
        );
        r.register(
            "command_seconds",
            "Wall time of the commands that ran",
            m.command_seconds.clone(),
        );
        r.register(
            "output_bytes",
            "Output bytes commands wrote, by stream",
            m.output_bytes.clone(),
        );
        r.register(
            "output_dropped_bytes",
            "Output bytes the per-stream caps dropped, by stream",
            m.output_dropped_bytes.clone(),
        );
        r.register("refusals", "Refused calls, by reason", m.refusals.clone());
        r.register(
            "engine_errors",
            "Container engine calls that failed, by operation",
            m.engine_errors.clone(),
        );
        r.register(
            "engine_call_seconds",
            "Time container engine calls took, by operation",
            m.engine_call_seconds.clone(),
        );
        r.register(
            "engine_pending_removals",
            "Containers the engine failed to remove, being retried now",
            m.engine_pending_removals.clone(),
        );
        r.register(
            "builds",
            "Environment builds by outcome (built, cached, failed)",
            m.builds.clone(),
        );
        r.register(
            "auth_failures",
            "Calls and web logins that gave a wrong token",
            m.auth_failures.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Counts one CreateSession that answered after `seconds`.
    pub fn session_created(&self, pooled: bool, seconds: f64) {
        self.sessions_created
            .get_or_create(&Pooled {
                pooled: pooled.to_string(),
            })
            .inc();
        self.session_start_seconds.observe(seconds);
    }

    /// Counts one command by `outcome`.
    pub fn command(&self, outcome: &str) {
        self.commands
            .get_or_create(&Outcome {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts a stream's bytes: `total` written, `dropped` by its cap.
    pub fn output(&self, stream: &str, total: u64, dropped: u64) {
        let label = Stream {
            stream: stream.to_string(),
        };
        self.output_bytes.get_or_create(&label).inc_by(total);
        self.output_dropped_bytes
            .get_or_create(&label)
            .inc_by(dropped);
    }

    /// Counts one refusal with `reason`.
    pub fn refused(&self, reason: &str) {
        self.refusals
            .get_or_create(&Reason {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one engine call `op` that took `seconds`, and whether it
    /// failed.
    pub fn engine_call(&self, op: &str, seconds: f64, failed: bool) {
        let label = Op { op: op.to_string() };
        self.engine_call_seconds
            .get_or_create(&label)
            .observe(seconds);
        if failed {
            self.engine_errors.get_or_create(&label).inc();
        }
    }

    /// Counts one build by `outcome`.
    pub fn build(&self, outcome: &str) {
        self.builds
            .get_or_create(&Outcome {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Everything, in Prometheus's text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_appear_under_their_names_and_labels() {
        let m = Metrics::new();
        m.command("exit");
        m.command("exit");
        m.command("timed_out");
        m.refused("OLD_STRING_NOT_FOUND");
        m.output("stdout", 10, 4);
        m.session_created(true, 0.01);
        m.engine_call("start_container", 0.2, true);
        m.sessions_open.set(3);
        let text = m.encode();
        for line in [
            "sandboxd_commands_total{outcome=\"exit\"} 2",
            "sandboxd_commands_total{outcome=\"timed_out\"} 1",
            "sandboxd_refusals_total{reason=\"OLD_STRING_NOT_FOUND\"} 1",
            "sandboxd_output_bytes_total{stream=\"stdout\"} 10",
            "sandboxd_output_dropped_bytes_total{stream=\"stdout\"} 4",
            "sandboxd_sessions_created_total{pooled=\"true\"} 1",
            "sandboxd_engine_errors_total{op=\"start_container\"} 1",
            "sandboxd_sessions_open 3",
            "sandboxd_session_start_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }
}
