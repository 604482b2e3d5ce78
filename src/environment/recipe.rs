//! A recipe made ready for the engine: the caller's Dockerfile (or a setup
//! script, which is a three-line Dockerfile) and build context, checked and
//! packed again into one tar archive, the base images it names, and the
//! hash that identifies what it builds.
//!
//! With a build CA, every stage is given it right after its `FROM`: the
//! bundle is copied in and named by the variables package tools read
//! (`SSL_CERT_FILE`, `PIP_CERT`, ...) as build arguments, which are not
//! kept in the image's environment.

use std::collections::BTreeSet;
use std::io::Read;

use sha2::{Digest, Sha256};

use super::error::Error;

/// Where the recipe's Dockerfile is put in the context.
pub const DOCKERFILE: &str = ".sandboxd.Dockerfile";
/// Where the build CA is put in the context.
const CA_IN_CONTEXT: &str = ".sandboxd-build-ca.pem";
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

/// A recipe ready for the engine.
#[derive(Debug)]
pub struct Recipe {
    /// The context to send, holding [`DOCKERFILE`] (and the CA).
    pub context: Vec<u8>,
    /// Images the recipe builds on, in order of appearance.
    pub bases: Vec<String>,
    /// Instructions sandboxd added, as the engine prints them.
    pub injected: BTreeSet<String>,
    /// How many steps the engine will count that the caller did not write.
    pub hidden_steps: u32,
    /// Hash of the caller's recipe and context, and of the CA (the base
    /// images' ids are added by the caller of [`Recipe::key`]).
    digest: Sha256,
}

impl Recipe {
    /// Checks and packs `source`. `default_base` is the base of a setup
    /// script that names none; `ca` the bundle handed to build steps.
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
        let froms = froms(&text)?;
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
        let (dockerfile, injected) = match ca {
            Some(ca) => {
                digest.update(b"ca\0");
                feed(&mut digest, ca);
                inject_ca(&text, &froms)
            }
            None => (text.clone(), BTreeSet::new()),
        };
        let mut builder = tar::Builder::new(Vec::new());
        for e in &entries {
            append(&mut builder, e)?;
        }
        append(
            &mut builder,
            &Entry::file(DOCKERFILE, dockerfile.into_bytes()),
        )?;
        if let Some(ca) = ca {
            append(&mut builder, &Entry::file(CA_IN_CONTEXT, ca.to_vec()))?;
        }
        let context = builder
            .into_inner()
            .map_err(|e| Error::InvalidContext(e.to_string()))?;
        let hidden_steps = (froms.len() * injected.len()) as u32;
        let mut bases = Vec::new();
        for from in froms {
            if let Some(image) = from.image
                && !bases.contains(&image)
            {
                bases.push(image);
            }
        }
        Ok(Recipe {
            context,
            bases,
            injected,
            hidden_steps,
            digest,
        })
    }

    /// The recipe's identity: its hash with the ids of its base images (so
    /// a rebuilt base gives a new key), 12 hex digits.
    pub fn key(&self, base_ids: &[String]) -> String {
        let mut digest = self.digest.clone();
        for id in base_ids {
            digest.update(b"base\0");
            feed(&mut digest, id.as_bytes());
        }
        hex::encode(digest.finalize())[..12].to_string()
    }
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
            return Err(bad(&path[..64], "the path is too long"));
        }
        if path.starts_with('/') || path.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(bad(
                &path,
                "paths must be relative and stay inside the context",
            ));
        }
        if path == DOCKERFILE || path == CA_IN_CONTEXT {
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

/// A `FROM` of the Dockerfile: the physical line it ends on, and the image
/// it names (`None` for an earlier stage or `scratch`).
#[derive(Debug, PartialEq)]
struct From {
    last_line: usize,
    image: Option<String>,
}

/// The Dockerfile's `FROM` instructions, honouring line continuations, the
/// `escape` directive and comments.
fn froms(text: &str) -> Result<Vec<From>, Error> {
    let escape = text
        .lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .find_map(|l| {
            let d = l.trim_start().trim_start_matches('#').trim();
            let (k, v) = d.split_once('=')?;
            (k.trim().eq_ignore_ascii_case("escape")).then(|| v.trim().chars().next())?
        })
        .unwrap_or('\\');
    let mut out = Vec::new();
    let mut stages = BTreeSet::new();
    let mut logical = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if logical.is_empty() && (trimmed.starts_with('#') || trimmed.is_empty()) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix(escape) {
            logical.push_str(body);
            logical.push(' ');
            continue;
        }
        logical.push_str(trimmed);
        let instruction = std::mem::take(&mut logical);
        let mut words = instruction.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let mut words = words.skip_while(|w| w.starts_with("--"));
        let image = words
            .next()
            .ok_or_else(|| Error::InvalidRecipe(format!("line {}: FROM names no image", i + 1)))?
            .to_string();
        if image.contains('$') {
            return Err(Error::InvalidRecipe(format!(
                "line {}: FROM {image}: name the base image itself; build arguments are not \
                 resolved here",
                i + 1
            )));
        }
        let base =
            if image.eq_ignore_ascii_case("scratch") || stages.contains(&image.to_lowercase()) {
                None
            } else {
                check_reference(&image)?;
                Some(image)
            };
        if let (Some(kw), Some(name)) = (words.next(), words.next())
            && kw.eq_ignore_ascii_case("AS")
        {
            stages.insert(name.to_lowercase());
        }
        out.push(From {
            last_line: i,
            image: base,
        });
    }
    Ok(out)
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

/// The Dockerfile with the CA given to every stage, and the instructions
/// added (as the engine will print them, to hide them from the caller).
fn inject_ca(text: &str, froms: &[From]) -> (String, BTreeSet<String>) {
    let mut added = vec![format!("COPY {CA_IN_CONTEXT} {CA_PATH}")];
    added.extend(CA_VARIABLES.iter().map(|v| format!("ARG {v}={CA_PATH}")));
    let after: BTreeSet<usize> = froms.iter().map(|f| f.last_line).collect();
    let mut out = String::with_capacity(text.len() + 512);
    for (i, line) in text.lines().enumerate() {
        out.push_str(line);
        out.push('\n');
        if after.contains(&i) {
            for a in &added {
                out.push_str(a);
                out.push('\n');
            }
        }
    }
    (out, added.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, data.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// Paths and contents of a packed context, in order.
    fn packed(context: &[u8]) -> Vec<(String, String)> {
        let mut archive = tar::Archive::new(context);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let mut data = String::new();
                e.read_to_string(&mut data).unwrap();
                (path, data)
            })
            .collect()
    }

    fn dockerfile(text: &str, context: Vec<u8>) -> Source {
        Source::Dockerfile {
            text: text.into(),
            context,
        }
    }

    #[test]
    fn froms_skip_stages_flags_comments_and_follow_continuations() {
        let text = "# escape=\\\n# a comment\nFROM --platform=linux/amd64 \\\n  base:1 AS build\nRUN x\nfrom build\nFROM scratch\nFROM other\n";
        let f = froms(text).unwrap();
        assert_eq!(
            f,
            vec![
                From {
                    last_line: 3,
                    image: Some("base:1".into())
                },
                From {
                    last_line: 5,
                    image: None
                },
                From {
                    last_line: 6,
                    image: None
                },
                From {
                    last_line: 7,
                    image: Some("other".into())
                },
            ]
        );
        assert!(matches!(
            froms("FROM $BASE\n"),
            Err(Error::InvalidRecipe(_))
        ));
        assert!(matches!(froms("FROM a;rm\n"), Err(Error::InvalidRecipe(_))));
    }

    #[test]
    fn the_key_follows_content_not_archive_order() {
        let a = Recipe::new(
            dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("a", "1"), ("b", "2")])),
            "d",
            None,
            1 << 20,
        )
        .unwrap();
        let b = Recipe::new(
            dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("b", "2"), ("a", "1")])),
            "d",
            None,
            1 << 20,
        )
        .unwrap();
        let c = Recipe::new(
            dockerfile("FROM b\nCOPY . /x\n", tar_of(&[("a", "1"), ("b", "3")])),
            "d",
            None,
            1 << 20,
        )
        .unwrap();
        let ids = ["sha256:1".to_string()];
        assert_eq!(a.key(&ids), b.key(&ids));
        assert_ne!(a.key(&ids), c.key(&ids));
        assert_ne!(a.key(&ids), a.key(&["sha256:2".to_string()]));
        assert_eq!(a.bases, vec!["b".to_string()]);
    }

    #[test]
    fn a_setup_script_is_a_dockerfile_on_the_default_base() {
        let r = Recipe::new(
            Source::Setup {
                script: "apt-get install -y x\n".into(),
                base: None,
            },
            "sandboxd-default:latest",
            None,
            1 << 20,
        )
        .unwrap();
        assert_eq!(r.bases, vec!["sandboxd-default:latest".to_string()]);
        let entries = packed(&r.context);
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, vec!["setup.sh", DOCKERFILE]);
        let df = &entries[1].1;
        assert!(df.starts_with("FROM sandboxd-default:latest\nCOPY setup.sh "));
    }

    #[test]
    fn the_ca_is_given_to_every_stage_and_changes_the_key() {
        let text = "FROM a AS one\nRUN x\nFROM b\nRUN y\n";
        let plain = Recipe::new(dockerfile(text, Vec::new()), "d", None, 1 << 20).unwrap();
        let with = Recipe::new(dockerfile(text, Vec::new()), "d", Some(b"CA"), 1 << 20).unwrap();
        assert_ne!(plain.key(&[]), with.key(&[]));
        let entries = read_context(&with.context).unwrap_err();
        // The packed context holds the reserved names: reading it as a
        // caller's context refuses them.
        assert!(entries.to_string().contains("reserved"), "{entries}");
        let mut archive = tar::Archive::new(&with.context[..]);
        let mut df = String::new();
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            if e.path().unwrap().to_str() == Some(DOCKERFILE) {
                e.read_to_string(&mut df).unwrap();
            }
        }
        assert_eq!(df.matches("COPY .sandboxd-build-ca.pem").count(), 2);
        assert!(df.contains("FROM b\nCOPY .sandboxd-build-ca.pem"));
        assert!(df.contains("ARG CARGO_HTTP_CAINFO=/usr/local/share/sandboxd/build-ca.pem\nRUN y"));
        assert_eq!(with.injected.len(), 1 + CA_VARIABLES.len());
    }

    #[test]
    fn bad_contexts_are_refused_naming_the_entry() {
        let big = Recipe::new(dockerfile("FROM a\n", vec![0; 2048]), "d", None, 1024);
        assert!(matches!(big, Err(Error::ContextTooLarge { .. })));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Fifo);
        h.set_size(0);
        b.append_data(&mut h, "pipe", std::io::empty()).unwrap();
        let fifo = Recipe::new(
            dockerfile("FROM a\n", b.into_inner().unwrap()),
            "d",
            None,
            1 << 20,
        );
        assert!(fifo.unwrap_err().to_string().contains("pipe"));
        let reserved = Recipe::new(
            dockerfile("FROM a\n", tar_of(&[(DOCKERFILE, "x")])),
            "d",
            None,
            1 << 20,
        );
        assert!(matches!(reserved, Err(Error::InvalidContext(_))));
        let none = Recipe::new(dockerfile("RUN x\n", Vec::new()), "d", None, 1 << 20);
        assert!(matches!(none, Err(Error::InvalidRecipe(_))));
        let garbage = Recipe::new(dockerfile("FROM a\n", vec![7; 1024]), "d", None, 1 << 20);
        assert!(matches!(garbage, Err(Error::InvalidContext(_))));
    }
}
