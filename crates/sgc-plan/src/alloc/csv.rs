//! The minimalloc CSV format: a header `id,lower,upper,size` (optionally `,offset`), then
//! one buffer per line, live over `[lower, upper)` and `size` bytes. Ids are strings and
//! must be unique. Blank lines are skipped; errors name the (1-based) line.

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
            found: header.to_string(),
        });
    }
    let mut rows = Vec::new();
    let mut seen: FxHashMap<String, usize> = FxHashMap::default();
    for (line, text) in lines {
        let row = parse_row(line, text, columns)?;
        if let Some(&first) = seen.get(&row.id) {
            return Err(CsvError::DuplicateId {
                line,
                id: row.id,
                first,
            });
        }
        seen.insert(row.id.clone(), line);
        rows.push(row);
    }
    Ok(rows)
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
            text: fields[k].to_string(),
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
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(want),
                "{text:?}: got {err:?}, want {want:?}"
            );
        }
        assert!(matches!(parse("\n\n"), Err(CsvError::Empty)));
    }
}
