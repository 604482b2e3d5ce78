//! Who owns a loopback TCP socket, from the kernel's socket tables
//! (`/proc/net/tcp`, `/proc/net/tcp6`): the listener on an address, and the
//! socket that accepted one of our connections. Every local user can listen
//! on a free loopback port, so the port alone says nothing about whose
//! service answers there.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// A socket's state in the tables: listening.
const LISTEN: &str = "0A";
/// The states of the service's end of a connection it has not yet had a
/// chance to close: established, or still a request socket (SYN_RECV),
/// which the tables show with its listener's owner.
const ACCEPTED: [&str; 2] = ["01", "03"];

/// The uid owning the TCP socket listening on exactly `addr`.
pub fn listener_owner(addr: SocketAddr) -> Option<u32> {
    let (table, want) = table_and_name(addr);
    find(table, |f| f[1] == want && f[3] == LISTEN)
}

/// The uid owning the service's end of our connection from `local` to
/// `remote`: the socket that accepted it, which carries its listener's
/// owner. Unlike the listener found before connecting, this is the very
/// socket our bytes would reach, whoever took the port in between.
pub fn accepting_owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let mut tables = vec![(table_and_name(remote), table_and_name(local).1)];
    // A dual-stack IPv6 listener accepts IPv4 connections too: its end
    // shows in the IPv6 table, addresses mapped.
    if let (IpAddr::V4(r), IpAddr::V4(l)) = (remote.ip(), local.ip()) {
        let mapped = |ip: std::net::Ipv4Addr, port| {
            table_and_name(SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), port)).1
        };
        tables.push((
            ("/proc/net/tcp6", mapped(r, remote.port())),
            mapped(l, local.port()),
        ));
    }
    tables
        .into_iter()
        .find_map(|((table, service_end), our_end)| {
            find(table, |f| {
                f[1] == service_end && f[2] == our_end && ACCEPTED.contains(&f[3])
            })
        })
}

/// The table listing `addr`'s family and `addr` as that table names it:
/// the hex of the address's bytes in memory (each 32-bit word in host
/// order) and the port in big-endian hex.
fn table_and_name(addr: SocketAddr) -> (&'static str, String) {
    match addr.ip() {
        IpAddr::V4(ip) => (
            "/proc/net/tcp",
            format!(
                "{:08X}:{:04X}",
                u32::from_ne_bytes(ip.octets()),
                addr.port()
            ),
        ),
        IpAddr::V6(ip) => (
            "/proc/net/tcp6",
            format!("{}:{:04X}", words(ip), addr.port()),
        ),
    }
}

fn words(ip: Ipv6Addr) -> String {
    ip.octets()
        .chunks(4)
        .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .collect()
}

/// The uid (eighth field) of the first line of `table` whose fields pass
/// `wanted` (given at least eight fields).
fn find(table: &str, wanted: impl Fn(&[&str]) -> bool) -> Option<u32> {
    std::fs::read_to_string(table)
        .ok()?
        .lines()
        .skip(1)
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() > 7 && wanted(&f))
                .then(|| f[7].parse().ok())
                .flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn listener_owners_are_read_from_the_kernel() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert_eq!(listener_owner(addr), Some(me()));
        drop(listener);
        assert_eq!(listener_owner(addr), None);
    }

    #[test]
    fn the_accepting_socket_is_found_for_ipv4_and_dual_stack_listeners() {
        for bind in ["127.0.0.1:0", "[::]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(bind) else {
                continue;
            };
            let port = listener.local_addr().unwrap().port();
            let target: SocketAddr = ([127, 0, 0, 1], port).into();
            let stream = std::net::TcpStream::connect(target).unwrap();
            let local = stream.local_addr().unwrap();
            // Not yet accepted, then accepted: the listener's owner both times.
            assert_eq!(accepting_owner(local, target), Some(me()), "{bind}");
            let (_accepted, _) = listener.accept().unwrap();
            assert_eq!(accepting_owner(local, target), Some(me()), "{bind}");
        }
    }
}
