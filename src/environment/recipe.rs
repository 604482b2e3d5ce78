//! A recipe made ready for the engine: the caller's Dockerfile (or a setup
//! script, which is a three-line Dockerfile) and build context, checked and
//! packed again into one tar archive, the base images it names, and the
//! hash that identifies what it builds.
//!
//! With a build CA, each base image is first given the bundle in a layer of
//! its own (see [`ca_layer`]), the Dockerfile's `FROM`s are pointed at those
//! layers, and each stage names the bundle through the variables package
//! tools read (`SSL_CERT_FILE`, `PIP_CERT`, ...) as build arguments, which
//! are not kept in the image's environment. The caller's context never
//! holds anything of sandboxd's that a `COPY .` could pick up: the
//! Dockerfile sandboxd writes is listed in `.dockerignore`, which the
//! engine honours for it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use sha2::{Digest, Sha256};

use super::error::Error;
use dockerfile::From;

mod dockerfile;

/// Where the recipe's Dockerfile is put in the context.
pub const DOCKERFILE: &str = ".sandboxd.Dockerfile";
/// The engine's ignore file, which it honours for the Dockerfile.
const DOCKERIGNORE: &str = ".dockerignore";
/// Where the build CA lands in each stage.
pub const CA_PATH: &str = "/usr/local/share/sandboxd/build-ca.pem";
/// Where a setup script lands in the image.
const SETUP_PATH: &str = "/usr/local/share/sandboxd/setup.sh";
/// Variables naming a CA bundle, one per family of tools.
const CA_VARIABLES: [&str; 7] = [
    "SSL_CERT_FILE",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "CARGO_HTTP_CAINFO",
];
/// Entries a context may hold.
pub const MAX_ENTRIES: usize = 100_000;
/// Bytes of an entry's path.
const MAX_PATH_BYTES: usize = 4096;

/// What the caller asked to build.
#[derive(Debug, Clone)]
pub enum Source {
    /// A Dockerfile and its build context (a tar archive, possibly empty).
    Dockerfile {
        /// The Dockerfile's text.
        text: String,
        /// The context as a tar archive.
        context: Vec<u8>,
    },
    /// A shell script run as root, with network, on a base image.
    Setup {
        /// The script.
        script: String,
        /// The base image; `None` for the service's default image.
        base: Option<String>,
    },
}

/// A recipe, checked.
#[derive(Debug)]
pub struct Recipe {
    /// The Dockerfile as the caller wrote it.
    text: String,
    /// Its `FROM`s.
    froms: Vec<From>,
    /// The context's entries.
    entries: Vec<Entry>,
    /// Images the recipe builds on, in order of appearance.
    pub bases: Vec<String>,
    /// Images (not stages) its `COPY --from` and `RUN --mount=from=` read
    /// files from: local images only, like bases, their ids in the key.
    pub images: Vec<String>,
    /// Hash of the caller's recipe and context, and of the CA (the base
    /// images' ids are added by the caller of [`Recipe::key`]).
    digest: Sha256,
    /// Whether build steps get a CA.
    ca: bool,
}

/// A recipe packed for the engine.
#[derive(Debug)]
pub struct Packed {
    /// The context to send, holding [`DOCKERFILE`].
    pub context: Vec<u8>,
    /// Instructions sandboxd added, as the engine prints them.
    pub injected: BTreeSet<String>,
    /// How many steps the engine will count that the caller did not write.
    pub hidden_steps: u32,
    /// Instructions sandboxd rewrote, as the engine prints them, with the
    /// caller's own words.
    pub shown_as: BTreeMap<String, String>,
    /// The `FROM` instructions, in order, exactly as the engine will print
    /// them: a `FROM` step the engine runs that is not the next of these
    /// means it read the Dockerfile differently, and the build is stopped.
    pub froms: Vec<String>,
}

impl Recipe {
    /// Checks `source`. `default_base` is the base of a setup script that
    /// names none; `ca` the bundle handed to build steps.
    pub fn new(
        source: Source,
        default_base: &str,
        ca: Option<&[u8]>,
        max_context: u64,
    ) -> Result<Recipe, Error> {
        let (text, context) = match source {
            Source::Dockerfile { text, context } => (text, context),
            Source::Setup { script, base } => {
                let base = base.unwrap_or_else(|| default_base.to_string());
                check_reference(&base)?;
                let text = format!(
                    "FROM {base}\nCOPY setup.sh {SETUP_PATH}\nRUN [\"/bin/sh\", \"-e\", \"{SETUP_PATH}\"]\n"
                );
                (text, single_file_tar("setup.sh", script.as_bytes(), 0o755)?)
            }
        };
        // The engine drops a byte-order mark: so must what reads FROMs.
        let text = match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_string(),
            None => text,
        };
        let size = (context.len() + text.len()) as u64;
        if size > max_context {
            return Err(Error::ContextTooLarge {
                size,
                max: max_context,
            });
        }
        if text.trim().is_empty() {
            return Err(Error::InvalidRecipe("the Dockerfile is empty".into()));
        }
        let dockerfile::Read { froms, images } = dockerfile::read(&text)?;
        if froms.is_empty() {
            return Err(Error::InvalidRecipe(
                "the Dockerfile has no FROM line: start it with `FROM sandboxd-default:latest` \
                 (or another local image)"
                    .into(),
            ));
        }
        let mut digest = Sha256::new();
        digest.update(b"sandboxd-environment-v1\0");
        feed(&mut digest, text.as_bytes());
        let entries = read_context(&context)?;
        for e in &entries {
            feed(&mut digest, e.path.as_bytes());
            digest.update([e.kind]);
            digest.update(e.mode.to_le_bytes());
            feed(&mut digest, e.link.as_bytes());
            feed(&mut digest, &e.data);
        }
        if let Some(ca) = ca {
            digest.update(b"ca\0");
            feed(&mut digest, ca);
        }
        let mut bases = Vec::new();
        for from in &froms {
            if let Some(image) = &from.image
                && !bases.contains(image)
            {
                bases.push(image.clone());
            }
        }
        Ok(Recipe {
            text,
            froms,
            entries,
            bases,
            images,
            digest,
            ca: ca.is_some(),
        })
    }

    /// The recipe's identity: its hash with the ids of its base images (so
    /// a rebuilt base gives a new key) and of the images it copies from,
    /// the whole sha256 in hex (a shorter key can be collided on purpose:
    /// one recipe answered with another).
    pub fn key(&self, base_ids: &[String], image_ids: &[String]) -> String {
        let mut digest = self.digest.clone();
        for id in base_ids {
            digest.update(b"base\0");
            feed(&mut digest, id.as_bytes());
        }
        for id in image_ids {
            digest.update(b"from\0");
            feed(&mut digest, id.as_bytes());
        }
        hex::encode(digest.finalize())
    }

    /// The context to send. `rebased` maps base images to the images that
    /// stand in for them (their CA layers).
    pub fn pack(&self, rebased: &BTreeMap<String, String>) -> Result<Packed, Error> {
        let (dockerfile, injected, shown_as, froms) =
            rebase(&self.text, &self.froms, rebased, self.ca);
        let hidden_steps = (self.froms.len() * injected.len()) as u32;
        let mut builder = tar::Builder::new(Vec::new());
        let mut ignored = false;
        for e in &self.entries {
            if e.path == DOCKERIGNORE && e.kind == b'f' {
                // The engine reads the Dockerfile, then drops it from the
                // context if this lists it.
                let mut data = e.data.clone();
                data.extend_from_slice(format!("\n{DOCKERFILE}\n").as_bytes());
                append(&mut builder, &Entry::file(DOCKERIGNORE, data))?;
                ignored = true;
            } else {
                append(&mut builder, e)?;
            }
        }
        if !ignored {
            let data = format!("{DOCKERIGNORE}\n{DOCKERFILE}\n").into_bytes();
            append(&mut builder, &Entry::file(DOCKERIGNORE, data))?;
        }
        append(
            &mut builder,
            &Entry::file(DOCKERFILE, dockerfile.into_bytes()),
        )?;
        let context = builder
            .into_inner()
            .map_err(|e| Error::InvalidContext(e.to_string()))?;
        Ok(Packed {
            context,
            injected,
            hidden_steps,
            shown_as,
            froms,
        })
    }
}

/// The recipe of a base image's CA layer: the base with the bundle in it.
/// Returns the context (holding `Dockerfile`) to build.
pub fn ca_layer(base: &str, ca: &[u8]) -> Result<Vec<u8>, Error> {
    check_reference(base)?;
    let mut builder = tar::Builder::new(Vec::new());
    let dockerfile = format!("FROM {base}\nCOPY build-ca.pem {CA_PATH}\n");
    append(
        &mut builder,
        &Entry::file("Dockerfile", dockerfile.into_bytes()),
    )?;
    append(&mut builder, &Entry::file("build-ca.pem", ca.to_vec()))?;
    builder
        .into_inner()
        .map_err(|e| Error::InvalidContext(e.to_string()))
}

/// The key of a base's CA layer: the base image's id and the bundle.
pub fn ca_layer_key(base_id: &str, ca: &[u8]) -> String {
    let mut digest = Sha256::new();
    digest.update(b"sandboxd-build-ca-v1\0");
    feed(&mut digest, base_id.as_bytes());
    feed(&mut digest, ca);
    hex::encode(digest.finalize())
}

fn feed(digest: &mut Sha256, bytes: &[u8]) {
    digest.update((bytes.len() as u64).to_le_bytes());
    digest.update(bytes);
}

/// One entry of a context.
#[derive(Debug)]
struct Entry {
    path: String,
    /// b'f' file, b'd' directory, b'l' symlink.
    kind: u8,
    mode: u32,
    link: String,
    data: Vec<u8>,
}

impl Entry {
    fn file(path: &str, data: Vec<u8>) -> Entry {
        Entry {
            path: path.to_string(),
            kind: b'f',
            mode: 0o644,
            link: String::new(),
            data,
        }
    }
}

fn single_file_tar(name: &str, data: &[u8], mode: u32) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut entry = Entry::file(name, data.to_vec());
    entry.mode = mode;
    append(&mut builder, &entry)?;
    builder
        .into_inner()
        .map_err(|e| Error::InvalidContext(e.to_string()))
}

fn append(builder: &mut tar::Builder<Vec<u8>>, e: &Entry) -> Result<(), Error> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(e.mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    let fail = |err: std::io::Error| Error::InvalidContext(format!("{}: {err}", e.path));
    match e.kind {
        b'd' => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder
                .append_data(&mut header, &e.path, std::io::empty())
                .map_err(fail)
        }
        b'l' => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder
                .append_link(&mut header, &e.path, &e.link)
                .map_err(fail)
        }
        _ => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(e.data.len() as u64);
            builder
                .append_data(&mut header, &e.path, &e.data[..])
                .map_err(fail)
        }
    }
}

/// The context's entries, checked, sorted by path (so the hash does not
/// depend on the order the archive was made in). Refused: paths that are
/// absolute or climb out with `..`, the names sandboxd puts in the
/// context, hard links, devices and FIFOs.
fn read_context(context: &[u8]) -> Result<Vec<Entry>, Error> {
    if context.is_empty() {
        return Ok(Vec::new());
    }
    let mut archive = tar::Archive::new(context);
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    let bad = |path: &str, why: &str| Error::InvalidContext(format!("{path}: {why}"));
    for entry in archive
        .entries()
        .map_err(|e| Error::InvalidContext(e.to_string()))?
    {
        let mut entry = entry.map_err(|e| Error::InvalidContext(e.to_string()))?;
        if entries.len() >= MAX_ENTRIES {
            return Err(Error::InvalidContext(format!(
                "more than {MAX_ENTRIES} entries"
            )));
        }
        let raw = entry
            .path()
            .map_err(|e| Error::InvalidContext(e.to_string()))?
            .to_string_lossy()
            .into_owned();
        let path = raw
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        if path.is_empty() || path == "." {
            continue;
        }
        if path.len() > MAX_PATH_BYTES {
            let start: String = path.chars().take(64).collect();
            return Err(bad(&format!("{start}…"), "the path is too long"));
        }
        if path.starts_with('/') || path.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(bad(
                &path,
                "paths must be relative and stay inside the context",
            ));
        }
        if path == DOCKERFILE {
            return Err(bad(&path, "this name is reserved for sandboxd"));
        }
        if !seen.insert(path.clone()) {
            return Err(bad(&path, "the archive holds this path twice"));
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        let kind = entry.header().entry_type();
        let e = if kind.is_file() {
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| bad(&path, &e.to_string()))?;
            Entry {
                path,
                kind: b'f',
                mode,
                link: String::new(),
                data,
            }
        } else if kind.is_dir() {
            Entry {
                path,
                kind: b'd',
                mode,
                link: String::new(),
                data: Vec::new(),
            }
        } else if kind.is_symlink() {
            let link = entry
                .link_name()
                .ok()
                .flatten()
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default();
            Entry {
                path,
                kind: b'l',
                mode,
                link,
                data: Vec::new(),
            }
        } else if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        } else {
            return Err(bad(
                &path,
                "only files, directories and symbolic links may be in a context",
            ));
        };
        entries.push(e);
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// Checks the `ONBUILD` triggers of base image `base`: they run in the
/// build, and get the checks of the recipe's own instructions.
pub fn check_triggers(base: &str, triggers: &[String]) -> Result<(), Error> {
    triggers
        .iter()
        .try_for_each(|t| dockerfile::check_trigger(base, t))
}

/// Checks an image reference's characters (it goes into a Dockerfile).
fn check_reference(image: &str) -> Result<(), Error> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && image
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRecipe(format!(
            "{image:?} is not an image reference"
        )))
    }
}

/// The Dockerfile with every `FROM` written on one line (so the engine
/// prints it exactly so), a base pointed at the image standing in for it,
/// and with `ca` each stage naming the CA as build arguments. Returns it,
/// the instructions added, the rewritten ones (as the engine prints them,
/// with the caller's own words) and the `FROM`s as written.
fn rebase(
    text: &str,
    froms: &[From],
    rebased: &BTreeMap<String, String>,
    ca: bool,
) -> (
    String,
    BTreeSet<String>,
    BTreeMap<String, String>,
    Vec<String>,
) {
    let added: Vec<String> = if ca {
        CA_VARIABLES
            .iter()
            .map(|v| format!("ARG {v}={CA_PATH}"))
            .collect()
    } else {
        Vec::new()
    };
    let mut written_froms = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len() + 1024);
    let mut shown_as = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(from) = froms.iter().find(|f| f.first_line == i) else {
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        };
        let original = from.words.join(" ");
        let written = match from.image.as_ref().and_then(|b| rebased.get(b)) {
            Some(stand_in) => {
                let words: Vec<&str> = from
                    .words
                    .iter()
                    .map(|w| {
                        if Some(w) == from.image.as_ref() {
                            stand_in.as_str()
                        } else {
                            w.as_str()
                        }
                    })
                    .collect();
                words.join(" ")
            }
            None => original.clone(),
        };
        if written != original {
            shown_as.insert(written.clone(), original);
        }
        written_froms.push(written.clone());
        out.push_str(&written);
        out.push('\n');
        for a in &added {
            out.push_str(a);
            out.push('\n');
        }
        i = from.last_line + 1;
    }
    (out, added.into_iter().collect(), shown_as, written_froms)
}

#[cfg(test)]
mod tests;
