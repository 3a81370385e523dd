//! The minimalloc CSV format: a header `id,lower,upper,size` (optionally `,offset`), then
//! one buffer per line, live over `[lower, upper)` and `size` bytes. Ids are strings and
//! must be unique. Blank lines are skipped; errors name the (1-based) line, and show the
//! text they quote with control characters escaped and cut to 80 characters.
//!
//! Lines end in LF or CRLF; a carriage return anywhere else (old Mac line ends) is an
//! error, as is a byte order mark, rather than a header that prints as the expected one but
//! does not match. The sizes must add up within 64 bits (any arena holding every buffer is
//! at most their sum, so no figure of an allocation can overflow): the error names the
//! line where the sum passes `u64::MAX`.

use super::Buffer;
use rustc_hash::FxHashMap;
use std::path::Path;
use thiserror::Error;

/// One row: the buffer's id, its lifetime and size, and its offset if the file had one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: String,
    pub buffer: Buffer,
    pub offset: Option<u64>,
}

/// Why a CSV file could not be read.
#[derive(Debug, Error)]
pub enum CsvError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the file is empty: expected the header `id,lower,upper,size`")]
    Empty,
    #[error("line 1: the text starts with a byte order mark (U+FEFF): save the file as UTF-8 without a BOM")]
    ByteOrderMark,
    #[error("line {line}: a carriage return (\\r) that does not end a CRLF line break: lines must end in LF or CRLF")]
    CarriageReturn { line: usize },
    #[error("line {line}: with buffer `{id}` the sizes add up past 64 bits (u64::MAX bytes): no arena can hold them")]
    TotalSize { line: usize, id: String },
    #[error("line {line}: header must be `id,lower,upper,size` or `id,lower,upper,size,offset`, found `{found}`")]
    Header { line: usize, found: String },
    #[error("line {line}: expected {expected} fields, found {found}")]
    FieldCount {
        line: usize,
        expected: usize,
        found: usize,
    },
    #[error("line {line}: `{column}` must be a non-negative integer that fits in 64 bits, found `{text}`")]
    Integer {
        line: usize,
        column: &'static str,
        text: String,
    },
    #[error("line {line}: empty id")]
    EmptyId { line: usize },
    #[error("line {line}: buffer `{id}` has lower {lower} >= upper {upper}: lifetimes are [lower, upper) and must not be empty")]
    EmptyLifetime {
        line: usize,
        id: String,
        lower: u64,
        upper: u64,
    },
    #[error("line {line}: id `{id}` was already used on line {first}: ids must be unique")]
    DuplicateId {
        line: usize,
        id: String,
        first: usize,
    },
}

const COLUMNS: [&str; 5] = ["id", "lower", "upper", "size", "offset"];

/// Reads and parses a CSV file.
pub fn read(path: impl AsRef<Path>) -> Result<Vec<Row>, CsvError> {
    let path = path.as_ref();
    let text = sgc_ir::file::read_limited(path).map_err(|source| CsvError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text)
}

/// Parses CSV text (see the module docs).
pub fn parse(text: &str) -> Result<Vec<Row>, CsvError> {
    if text.starts_with('\u{feff}') {
        return Err(CsvError::ByteOrderMark);
    }
    if let Some(at) = text
        .match_indices('\r')
        .map(|(i, _)| i)
        .find(|&i| !text[i + 1..].starts_with('\n'))
    {
        return Err(CsvError::CarriageReturn {
            line: text[..at].matches('\n').count() + 1,
        });
    }
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(k, l)| (k + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (header_line, header) = lines.next().ok_or(CsvError::Empty)?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let columns = names.len();
    if !(columns == 4 || columns == 5) || names[..] != COLUMNS[..columns] {
        return Err(CsvError::Header {
            line: header_line,
            found: shown(header),
        });
    }
    let mut rows = Vec::new();
    let mut seen: FxHashMap<String, usize> = FxHashMap::default();
    let mut total = 0u64;
    for (line, text) in lines {
        let row = parse_row(line, text, columns)?;
        if let Some(&first) = seen.get(&row.id) {
            return Err(CsvError::DuplicateId {
                line,
                id: row.id,
                first,
            });
        }
        total = match total.checked_add(row.buffer.size) {
            Some(t) => t,
            None => return Err(CsvError::TotalSize { line, id: row.id }),
        };
        seen.insert(row.id.clone(), line);
        rows.push(row);
    }
    Ok(rows)
}

/// Text quoted in a message: control characters escaped, at most 80 characters.
fn shown(text: &str) -> String {
    let escaped: String = text.escape_debug().collect();
    if escaped.chars().count() > 80 {
        format!("{}...", escaped.chars().take(77).collect::<String>())
    } else {
        escaped
    }
}

fn parse_row(line: usize, text: &str, columns: usize) -> Result<Row, CsvError> {
    let fields: Vec<&str> = text.split(',').map(str::trim).collect();
    if fields.len() != columns {
        return Err(CsvError::FieldCount {
            line,
            expected: columns,
            found: fields.len(),
        });
    }
    let id = fields[0].to_string();
    if id.is_empty() {
        return Err(CsvError::EmptyId { line });
    }
    let int = |k: usize| {
        fields[k].parse::<u64>().map_err(|_| CsvError::Integer {
            line,
            column: COLUMNS[k],
            text: shown(fields[k]),
        })
    };
    let (lower, upper, size) = (int(1)?, int(2)?, int(3)?);
    let offset = if columns == 5 { Some(int(4)?) } else { None };
    if lower >= upper {
        return Err(CsvError::EmptyLifetime {
            line,
            id,
            lower,
            upper,
        });
    }
    Ok(Row {
        id,
        buffer: Buffer { lower, upper, size },
        offset,
    })
}

/// The buffers of the rows, in order (buffer `k` is row `k`).
pub fn buffers(rows: &[Row]) -> Vec<Buffer> {
    rows.iter().map(|r| r.buffer).collect()
}

/// Writes the rows with an `offset` column taken from `offsets` (one per row).
pub fn write(rows: &[Row], offsets: &[u64]) -> String {
    let mut out = String::from("id,lower,upper,size,offset\n");
    for (r, o) in rows.iter().zip(offsets) {
        let b = r.buffer;
        out.push_str(&format!(
            "{},{},{},{},{o}\n",
            r.id, b.lower, b.upper, b.size
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_and_without_offsets() {
        let rows = parse("id,lower,upper,size\nb1,0,3,4\n\nb2,3,9,4\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].id, "b2");
        assert_eq!(
            rows[1].buffer,
            Buffer {
                lower: 3,
                upper: 9,
                size: 4
            }
        );
        let rows = parse("id,lower,upper,size,offset\nx,0,1,8,16\n").unwrap();
        assert_eq!(rows[0].offset, Some(16));
        let again = parse(&write(&rows, &[16])).unwrap();
        assert_eq!(again, rows);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("id,lo,upper,size\n", "line 1: header"),
            ("id,lower,upper,size\na,0,1\n", "line 2: expected 4 fields"),
            ("id,lower,upper,size\na,0,1,4\nb,0,x,4\n", "line 3: `upper`"),
            ("id,lower,upper,size\na,0,1,-4\n", "line 2: `size`"),
            (
                "id,lower,upper,size\na,0,1,99999999999999999999\n",
                "line 2: `size`",
            ),
            (
                "id,lower,upper,size\na,5,5,4\n",
                "line 2: buffer `a` has lower 5",
            ),
            (
                "id,lower,upper,size\na,0,1,4\n\na,1,2,4\n",
                "line 4: id `a` was already used on line 2",
            ),
            ("id,lower,upper,size\n,0,1,4\n", "line 2: empty id"),
            ("\u{feff}id,lower,upper,size\n", "line 1: the text starts with a byte order mark"),
            ("id,lower,upper,size\ra,0,1,4\r", "line 1: a carriage return"),
            ("id,lower,upper,size\r\na,0,1,4\r\nb,0\r,1,4\n", "line 3: a carriage return"),
            (
                "id,lower,upper,size\na,0,1,18446744073709551615\nb,5,6,1\n",
                "line 3: with buffer `b` the sizes add up past 64 bits",
            ),
            ("id,lower,upper,size\na,0,1,4\x07\n", "line 2: `size` must be a non-negative integer that fits in 64 bits, found `4\\u{7}`"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(want),
                "{text:?}: got {err:?}, want {want:?}"
            );
        }
        assert!(matches!(parse("\n\n"), Err(CsvError::Empty)));
        // CRLF line ends are fine; the largest sum that fits is accepted.
        let rows =
            parse("id,lower,upper,size\r\na,0,1,18446744073709551614\r\nb,0,1,1\r\n").unwrap();
        assert_eq!(rows.len(), 2);
    }
}
