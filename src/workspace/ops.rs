//! The file tools' blocking halves: what runs on the blocking pool against
//! the workspace's root fd (reads, creates, edits, listings, walks), and
//! the helpers only they use.

use super::*;

impl Inner {
    /// Write-queue key: the absolute real host path.
    pub(super) fn key(&self, real: &RelPath) -> PathBuf {
        self.root.host().join(real.as_str())
    }

    /// Opens `rel` as a regular file for reading, checks its size and
    /// returns its bytes and stat.
    pub(super) fn read_regular(
        &self,
        rel: &RelPath,
        fd: io::Result<OwnedFd>,
    ) -> Result<(Vec<u8>, Stat), Error> {
        let fd = fd.map_err(|e| Error::from_io("open", rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::from_io("stat", rel, e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::NotAFile {
                path: rel.to_string(),
            });
        }
        let limit = self.limits.max_file_bytes;
        if st.st_size as u64 > limit {
            return Err(Error::TooLarge {
                path: rel.to_string(),
                size: st.st_size as u64,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(st.st_size as usize);
        // take() guards against a file that grows while we read it.
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::from_io("read", rel, e))?;
        if bytes.len() as u64 > limit {
            return Err(Error::TooLarge {
                path: rel.to_string(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok((bytes, st))
    }

    pub(super) fn read(&self, path: &str, offset: u64, limit: u64) -> Result<ReadOutput, Error> {
        let rel = self.root.rel(path)?;
        let fd = self
            .root
            .open(&rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty());
        let (bytes, _) = self.read_regular(&rel, fd)?;
        let sha256 = sha256_hex(&bytes);
        let text = edit::decode(&bytes)
            .map_err(|_| Error::NotText {
                path: rel.to_string(),
            })?
            .text;
        let total = edit::count_lines(text) as u64;
        let first = offset.max(1);
        let limit = if limit == 0 {
            self.limits.read_default_lines
        } else {
            limit
        };
        if total == 0 && first == 1 {
            return Ok(ReadOutput {
                path: rel.to_string(),
                content: String::new(),
                first_line: 0,
                last_line: 0,
                total_lines: 0,
                sha256,
                truncated: false,
                size_bytes: bytes.len() as u64,
                message: format!("{rel} is empty"),
            });
        }
        if first > total {
            return Err(Error::LineOutOfRange {
                path: rel.to_string(),
                offset: first,
                total,
            });
        }
        let mut content = String::new();
        let mut last = first - 1;
        let mut cut_line = false;
        for line in text
            .split_inclusive('\n')
            .skip((first - 1) as usize)
            .take(limit as usize)
        {
            if content.len() + line.len() > self.limits.read_max_bytes {
                if content.is_empty() {
                    // One line longer than the whole budget: return its head.
                    let mut end = self.limits.read_max_bytes;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    content.push_str(&line[..end]);
                    last += 1;
                    cut_line = true;
                }
                break;
            }
            content.push_str(line);
            last += 1;
        }
        let truncated = last < total || cut_line;
        let mut message = format!("lines {first}-{last} of {total} in {rel}");
        if cut_line {
            message.push_str(&format!(
                "; line {last} is longer than {} bytes and was cut",
                self.limits.read_max_bytes
            ));
        } else if truncated {
            message.push_str(&format!("; continue with offset {}", last + 1));
        }
        Ok(ReadOutput {
            path: rel.to_string(),
            content,
            first_line: first,
            last_line: last,
            total_lines: total,
            sha256,
            truncated,
            size_bytes: bytes.len() as u64,
            message,
        })
    }

    pub(super) fn create_locked(
        &self,
        rel: &RelPath,
        real_parent: &RelPath,
        name: &str,
        bytes: &[u8],
        policy: &Policy,
    ) -> Result<CreateOutput, Error> {
        let dir = self
            .root
            .open(real_parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", real_parent, e))?;
        let landed = self
            .root
            .real_of(&dir)
            .map_err(|e| Error::from_io("resolve", real_parent, e))?
            .join(name);
        policy
            .check_write("CreateFile", landed.as_str())
            .map_err(Error::Denied)?;
        write::write_atomic(&dir, name, bytes, Target::CreateNew(self.new_owner))
            .map_err(|e| Error::from_io("create", rel, e))?;
        let total_lines = std::str::from_utf8(bytes).map_or(0, edit::count_lines) as u64;
        Ok(CreateOutput {
            path: rel.to_string(),
            landed: landed.as_str().to_string(),
            sha256: sha256_hex(bytes),
            total_lines,
            message: format!(
                "created {rel}: {}, {}",
                plural(total_lines, "line", "lines"),
                plural(bytes.len() as u64, "byte", "bytes")
            ),
        })
    }

    pub(super) fn edit_locked(
        &self,
        rel: &RelPath,
        real: &RelPath,
        edits: &[EditSpec],
        expected: Option<&str>,
        policy: &Policy,
    ) -> Result<EditOutput, Error> {
        let (parent, name) = real.split_last().ok_or_else(|| Error::NotAFile {
            path: rel.to_string(),
        })?;
        let dir = self
            .root
            .open(&parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", &parent, e))?;
        // The directory fd's own path: where the write will really land.
        let landed = self
            .root
            .real_of(&dir)
            .map_err(|e| Error::from_io("resolve", &parent, e))?
            .join(name);
        policy
            .check_write("EditFile", landed.as_str())
            .map_err(Error::Denied)?;
        let fd = walk::open_child_file(&dir, name);
        let (bytes, st) = self.read_regular(rel, fd)?;
        // The journal records it; ~0.7 ms per MB.
        let before = sha256_hex(&bytes);
        if let Some(expected) = expected
            && !expected.eq_ignore_ascii_case(&before)
        {
            return Err(Error::Stale {
                path: rel.to_string(),
                expected: expected.to_string(),
                actual: before,
            });
        }
        let applied = edit::apply(&bytes, edits, rel.as_str(), self.limits.max_file_bytes)
            .map_err(|source| match source {
                EditError::NotText => Error::NotText {
                    path: rel.to_string(),
                },
                source => Error::Edit {
                    path: rel.to_string(),
                    source,
                },
            })?;
        write::write_atomic(&dir, name, &applied.bytes, Target::Replace(&st))
            .map_err(|e| Error::from_io("write", rel, e))?;
        let replacements = applied.replacements as u64;
        let message = format!(
            "changed {rel}: {} from line {}, line delta {:+}",
            plural(replacements, "replacement", "replacements"),
            applied.first_changed_line,
            applied.line_delta
        );
        Ok(EditOutput {
            path: rel.to_string(),
            landed: landed.as_str().to_string(),
            sha256_before: before,
            replacements,
            first_changed_line: applied.first_changed_line as u64,
            line_delta: applied.line_delta,
            diff: applied.diff,
            diff_truncated: applied.diff_truncated,
            sha256: sha256_hex(&applied.bytes),
            message,
        })
    }

    pub(super) fn open_dir(&self, rel: &RelPath) -> Result<OwnedFd, Error> {
        self.root
            .open(rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", rel, e))
    }

    pub(super) fn list_dir(&self, path: &str) -> Result<ListOutput, Error> {
        let rel = self.root.rel(path)?;
        let dir = self.open_dir(&rel)?;
        let (entries, truncated) = walk::list(&dir, self.limits.list_max_entries)
            .map_err(|e| Error::from_io("list", &rel, e))?;
        Ok(ListOutput {
            path: rel.to_string(),
            entries,
            truncated,
        })
    }

    pub(super) fn find(
        &self,
        pattern: &str,
        path: &str,
        limit: u64,
        stop: &AtomicBool,
    ) -> Result<FindOutput, Error> {
        let glob = compile_glob(pattern)?;
        let rel = self.root.rel(path)?;
        self.open_dir(&rel)?;
        let limit = clamp_count(
            limit,
            self.limits.find_default_limit,
            self.limits.find_max_limit,
        );
        let mut paths = Vec::new();
        let mut bytes = 0;
        let mut truncated = false;
        let deadline = std::time::Instant::now() + self.limits.walk_time;
        walk::walk_files(&self.root, &rel, &self.limits.walk, &mut |file, _, _| {
            if stop.load(Ordering::Relaxed) {
                return Ok(Flow::Stop);
            }
            if std::time::Instant::now() > deadline {
                truncated = true;
                return Ok(Flow::Stop);
            }
            if glob.is_match(file.as_str()) {
                let cost = file.as_str().len() + REPLY_ITEM_OVERHEAD;
                if paths.len() == limit || bytes + cost > self.limits.reply_max_bytes {
                    truncated = true;
                    return Ok(Flow::Stop);
                }
                bytes += cost;
                paths.push(file.as_str().to_string());
            }
            Ok(Flow::Continue)
        })
        .map_err(|e| walk_error("FindFiles", &rel, e))?;
        Ok(FindOutput { paths, truncated })
    }

    /// Reads a file for searching: `None` for anything that is not
    /// searchable text (unreadable, special, oversized, binary). The head is
    /// checked for NUL bytes before the rest is read, so a large binary or
    /// sparse file costs one small read.
    pub(super) fn searchable(&self, dir: &OwnedFd, name: &str) -> Option<Vec<u8>> {
        const HEAD: usize = 8192;
        let fd = walk::open_child_file(dir, name).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_size as u64 > self.limits.max_file_bytes
        {
            return None;
        }
        let mut file = File::from(fd).take(self.limits.max_file_bytes + 1);
        let mut bytes = Vec::with_capacity((st.st_size as usize).min(HEAD));
        (&mut file).take(HEAD as u64).read_to_end(&mut bytes).ok()?;
        if bytes.contains(&0) {
            return None;
        }
        file.read_to_end(&mut bytes).ok()?;
        (bytes.len() as u64 <= self.limits.max_file_bytes).then_some(bytes)
    }

    pub(super) fn search(&self, q: &SearchQuery, stop: &AtomicBool) -> Result<SearchOutput, Error> {
        // One pattern for both the whole-file prefilter and the per-line
        // match: multi-line, so `^` and `$` mean a line's start and end in
        // either (and `$` ignores a CRLF's `\r`). Whatever matches a line
        // then matches the file too, so the prefilter never skips a file
        // with a matching line. A pattern that anchors to the whole text
        // (`\A`, `\z`) or changes flags inline could disagree: the
        // prefilter is not used for it.
        let re = RegexBuilder::new(&q.pattern)
            .case_insensitive(q.case_insensitive)
            .multi_line(true)
            .crlf(true)
            .size_limit(16 * 1024 * 1024)
            .build()
            .map_err(|e| Error::InvalidPattern {
                pattern: q.pattern.clone(),
                why: e.to_string(),
            })?;
        let prefilter = !["\\A", "\\z", "(?"].iter().any(|s| q.pattern.contains(s));
        let glob = if q.glob.is_empty() {
            None
        } else {
            Some(compile_glob(&q.glob)?)
        };
        let rel = self.root.rel(&q.path)?;
        let limit = clamp_count(
            q.limit,
            self.limits.search_default_limit,
            self.limits.search_max_limit,
        );
        let mut out = SearchOutput {
            matches: Vec::new(),
            truncated: false,
            files_searched: 0,
        };
        let mut bytes = 0;
        // Bytes read so far: one call scans at most `search_scan_bytes`.
        let mut scanned = 0u64;
        let deadline = std::time::Instant::now() + self.limits.walk_time;
        // Whether the call must end now: its caller left, or its time is up.
        let over = |out: &mut SearchOutput| {
            if stop.load(Ordering::Relaxed) {
                return true;
            }
            let late = std::time::Instant::now() > deadline;
            out.truncated |= late;
            late
        };
        let mut visit = |file: &RelPath, dir: &OwnedFd, name: &str| -> io::Result<Flow> {
            if over(&mut out) {
                return Ok(Flow::Stop);
            }
            if glob.as_ref().is_some_and(|g| !g.is_match(file.as_str())) {
                return Ok(Flow::Continue);
            }
            // Unreadable, oversized or binary files are not searchable text.
            let Some(bytes_read) = self.searchable(dir, name) else {
                return Ok(Flow::Continue);
            };
            scanned += bytes_read.len() as u64;
            if scanned > self.limits.search_scan_bytes {
                out.truncated = true;
                return Ok(Flow::Stop);
            }
            let Ok(text) = std::str::from_utf8(&bytes_read) else {
                return Ok(Flow::Continue);
            };
            out.files_searched += 1;
            if prefilter && !re.is_match(text) {
                return Ok(Flow::Continue);
            }
            for (i, line) in text.lines().enumerate() {
                if i % 4096 == 4095 && over(&mut out) {
                    return Ok(Flow::Stop);
                }
                if re.is_match(line) {
                    let text = cut_chars(line, self.limits.search_line_chars);
                    let cost = file.as_str().len() + text.len() + REPLY_ITEM_OVERHEAD;
                    if out.matches.len() == limit || bytes + cost > self.limits.reply_max_bytes {
                        out.truncated = true;
                        return Ok(Flow::Stop);
                    }
                    bytes += cost;
                    out.matches.push(SearchMatch {
                        path: file.as_str().to_string(),
                        line: i as u64 + 1,
                        text,
                    });
                }
            }
            Ok(Flow::Continue)
        };
        match self.open_dir(&rel) {
            Ok(_) => walk::walk_files(&self.root, &rel, &self.limits.walk, &mut visit)
                .map_err(|e| walk_error("SearchFiles", &rel, e))?,
            // A single file: search just that one.
            Err(Error::NotADirectory { .. }) => {
                let (parent, name) = rel.split_last().ok_or_else(|| Error::NotADirectory {
                    path: rel.to_string(),
                })?;
                let dir = self.open_dir(&parent)?;
                visit(&rel, &dir, name).map_err(|e| Error::from_io("search", &rel, e))?;
            }
            Err(e) => return Err(e),
        }
        Ok(out)
    }
}

/// Bytes counted per path or match of a reply beyond its text (field tags,
/// lengths, the line number), so the byte bound holds for the encoded reply.
pub(super) const REPLY_ITEM_OVERHEAD: usize = 16;

/// A walk's failure as the tool's error.
pub(super) fn walk_error(tool: &'static str, rel: &RelPath, e: WalkError) -> Error {
    match e {
        WalkError::Io(e) => Error::from_io("walk", rel, e),
        WalkError::Limit { path, what, limit } => Error::WalkLimit {
            tool,
            path: path.to_string(),
            what,
            limit,
        },
    }
}

/// Compiles a glob over workspace-relative paths; one without `/` matches a
/// file name at any depth.
pub(super) fn compile_glob(pattern: &str) -> Result<GlobMatcher, Error> {
    let full = if pattern.contains('/') {
        pattern.trim_start_matches("./").to_string()
    } else {
        format!("**/{pattern}")
    };
    GlobBuilder::new(&full)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidPattern {
            pattern: pattern.to_string(),
            why: e.kind().to_string(),
        })
}

/// `s` cut to at most `max` characters, marked with "…" when cut.
pub(super) fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
