//! Graph files on disk: plain JSON text or gzip-compressed JSON (`.json.gz`).
//!
//! Reading decides by content, not by name: a file whose first two bytes are the gzip
//! magic `1f 8b` is decompressed (every member, as `cat a.gz b.gz` makes), anything else
//! is read as it is. JSON text never starts with those bytes (`0x1f` is a control
//! character that JSON does not allow outside strings), so the test cannot mistake one
//! for the other. A gzip stream that is truncated or corrupt (bad header, bad deflate
//! data, a CRC or length that does not match) is a [`LoadError::Gzip`] naming the file;
//! text that is not UTF-8 is a [`LoadError::Io`] naming it. Decompression uses `flate2`
//! with its pure-Rust backend (`miniz_oxide`), so no C library is involved.
//!
//! Writing compresses when the path ends in `.gz` and writes plain text otherwise, always
//! through a temporary file renamed into place. Reading stops at a size limit (4 GiB by
//! default, for the file and for its decompressed text), so an endless or enormous input
//! is an error, not an exhausted machine.

use crate::error::LoadError;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The first two bytes of every gzip stream (RFC 1952).
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `bytes` start like a gzip stream.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// Whether a path names a gzip file to write (its name ends in `.gz`, any case).
pub fn wants_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Reads a graph file's text, decompressing it when it is gzip.
pub fn read_text(path: &Path) -> Result<String, LoadError> {
    let shown = || path.display().to_string();
    let io = |source| LoadError::Io {
        path: shown(),
        source,
    };
    let limit = max_input_bytes();
    let raw = read_file_capped(path, limit).map_err(io)?;
    let bytes = if is_gzip(&raw) {
        let mut out = Vec::new();
        MultiGzDecoder::new(&raw[..])
            .take(limit.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|source| LoadError::Gzip {
                path: shown(),
                source,
            })?;
        // Above the limit is not a damaged stream: it says so, not "truncated or corrupt".
        if out.len() as u64 > limit {
            return Err(io(too_large("the decompressed text", limit)));
        }
        out
    } else {
        raw
    };
    utf8_text(bytes).map_err(io)
}

/// The bytes as text: UTF-8 without a byte order mark. A BOM is refused (JSON texts must
/// not start with one, RFC 8259; and a CSV header would not read as `id,...` with it);
/// an invalid byte is named by its line and column.
fn utf8_text(bytes: Vec<u8>) -> std::io::Result<String> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    if bytes.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Err(invalid(
            "the text starts with a UTF-8 byte order mark (bytes EF BB BF): save it as UTF-8 without a BOM".into(),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = &bytes[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        // Characters, not bytes, before the invalid byte on its line (that part is valid).
        let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
        invalid(format!(
            "not UTF-8 text: invalid byte 0x{:02X} at line {line}, column {column} (byte offset {at}); save the file as UTF-8",
            bytes[at]
        ))
    })
}

/// Writes text to `path`, gzip-compressed when the path ends in `.gz`, atomically
/// ([`write_atomic`]).
pub fn write_text(path: &Path, text: &str) -> std::io::Result<()> {
    if !wants_gzip(path) {
        return write_atomic(path, text.as_bytes());
    }
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(text.as_bytes())?;
    write_atomic(path, &gz.finish()?)
}

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk and renames it
/// over `path`: a reader (or an interrupted run) sees the old file or the new one, never
/// a part. The temporary file is removed when anything fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"))?;
    let tmp = path.with_file_name(format!(
        ".{}.sgc-tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The largest input file (and decompressed graph) read, in bytes; see
/// [`set_max_input_bytes`].
static MAX_INPUT_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_INPUT_BYTES);

/// Inputs above 4 GiB are refused unless the limit is raised (`sgc --max-input SIZE`).
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 4 << 30;

/// Sets the input size limit for every read from now on (the CLI's `--max-input`).
pub fn set_max_input_bytes(limit: u64) {
    MAX_INPUT_BYTES.store(limit, Ordering::Relaxed);
}

/// The input size limit.
pub fn max_input_bytes() -> u64 {
    MAX_INPUT_BYTES.load(Ordering::Relaxed)
}

/// A UTF-8 text file (a plan, a CSV list, a baseline), read up to the input limit; errors
/// are I/O errors saying what went wrong (the caller names the file).
pub fn read_limited(path: &Path) -> std::io::Result<String> {
    utf8_text(read_file_capped(path, max_input_bytes())?)
}

/// A file's bytes: refused before reading when its size is known to pass `limit` (a regular
/// file), read up to `limit` otherwise (a device, a pipe).
fn read_file_capped(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the file has {len} bytes, above the input limit of {limit}; raise it with --max-input SIZE"
            ),
        ));
    }
    read_capped(file, limit, "the file")
}

/// Reads at most `limit` bytes of `r`; more is an error saying so (a device such as
/// `/dev/zero` or a decompression bomb ends here instead of filling memory).
fn read_capped(r: impl Read, limit: u64, what: &str) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_large(what, limit));
    }
    Ok(out)
}

fn too_large(what: &str, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{what} is larger than the input limit of {limit} bytes; raise it with --max-input SIZE"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sgc-ir-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join(name)
    }

    #[test]
    fn gzip_is_told_by_content_and_written_by_name() {
        let gz = scratch("a.json.gz");
        write_text(&gz, "{\"x\": 1}").unwrap();
        let raw = std::fs::read(&gz).unwrap();
        assert!(is_gzip(&raw));
        // A gzip file under a plain name still reads as gzip.
        let renamed = scratch("a_plain_name.json");
        std::fs::write(&renamed, &raw).unwrap();
        assert_eq!(read_text(&renamed).unwrap(), "{\"x\": 1}");
        assert_eq!(read_text(&gz).unwrap(), "{\"x\": 1}");
        let plain = scratch("b.json");
        write_text(&plain, "{}").unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), b"{}");
        assert!(wants_gzip(Path::new("x.JSON.GZ")) && !wants_gzip(Path::new("x.json")));
    }

    #[test]
    fn concatenated_members_are_all_read() {
        let one = scratch("one.gz");
        let two = scratch("two.gz");
        write_text(&one, "[1,").unwrap();
        write_text(&two, "2]").unwrap();
        let both = scratch("both.gz");
        let mut raw = std::fs::read(&one).unwrap();
        raw.extend(std::fs::read(&two).unwrap());
        std::fs::write(&both, raw).unwrap();
        assert_eq!(read_text(&both).unwrap(), "[1,2]");
    }

    #[test]
    fn damaged_gzip_and_non_utf8_text_name_the_file() {
        let gz = scratch("damaged.json.gz");
        write_text(&gz, &"{\"key\": \"value\"}\n".repeat(200)).unwrap();
        let raw = std::fs::read(&gz).unwrap();
        let mut corrupt = raw.clone();
        let mid = corrupt.len() / 2;
        corrupt[mid] ^= 0xff;
        for (name, bytes) in [
            ("truncated.json.gz", &raw[..raw.len() / 2]),
            ("no_trailer.json.gz", &raw[..raw.len() - 4]),
            ("magic_only.json.gz", &raw[..2]),
            ("corrupt.json.gz", &corrupt[..]),
        ] {
            let path = scratch(name);
            std::fs::write(&path, bytes).unwrap();
            let err = read_text(&path).expect_err(name);
            assert!(matches!(err, LoadError::Gzip { .. }), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        let latin1 = scratch("latin1.json");
        std::fs::write(&latin1, b"{\"name\": \"caf\xe9\"}").unwrap();
        let err = read_text(&latin1).expect_err("not UTF-8");
        assert!(err.to_string().contains("latin1.json"), "{err}");
        assert!(err.to_string().contains("not UTF-8"), "{err}");
        let second_line = scratch("latin1_line2.csv");
        std::fs::write(&second_line, b"id,lower\n\xc3\xa9t\xe9\n").unwrap();
        let err = read_limited(&second_line).expect_err("not UTF-8");
        assert!(
            err.to_string()
                .contains("invalid byte 0xE9 at line 2, column 3 (byte offset 12)"),
            "{err}"
        );
        let bom = scratch("bom.json");
        std::fs::write(&bom, b"\xef\xbb\xbf{}").unwrap();
        for err in [
            read_text(&bom).expect_err("a BOM").to_string(),
            read_limited(&bom).expect_err("a BOM").to_string(),
        ] {
            assert!(err.contains("byte order mark"), "{err}");
        }
    }
}
