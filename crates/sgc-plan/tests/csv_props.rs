//! Properties of the minimalloc CSV loader (proptest; about a second in all):
//!
//! - random valid lists, written by hand in every accepted spelling (offset column or not,
//!   LF or CRLF, blank lines, spaces around fields), parse to exactly their rows, and
//!   `csv::write` of the rows parses back to the same buffers;
//! - byte mutations of valid lists never panic, and every error names a line of the text
//!   (or says the text is empty);
//! - one line broken in one of the ways the format forbids (missing or extra field, negative,
//!   fractional or overflowing integer, reversed lifetime, empty id, sizes summing past 64
//!   bits, a repeated id) is reported at that line, a repeated id naming its first use.

use proptest::prelude::*;
use sgc_ir::testgen::mutate_bytes;
use sgc_plan::alloc::csv::{self, CsvError, Row};
use sgc_plan::alloc::Buffer;

/// A valid list: unique ids (letters, digits, `_.-:/` and a space inside), non-empty
/// lifetimes, sizes whose sum fits in 64 bits, offsets on every row or none.
fn rows() -> impl Strategy<Value = Vec<Row>> {
    let id = "[a-zA-Z0-9_.:/-]([a-zA-Z0-9_.:/ -]{0,6}[a-zA-Z0-9_.:/-])?";
    let row = (id, 0u64..1_000, 1u64..1_000, 0u64..(1 << 56), any::<u64>());
    (proptest::collection::vec(row, 0..40), any::<bool>()).prop_map(|(raw, offsets)| {
        let mut seen = std::collections::HashSet::new();
        raw.into_iter()
            .filter(|(id, ..)| seen.insert(id.clone()))
            .map(|(id, lower, len, size, offset)| Row {
                id,
                buffer: Buffer {
                    lower,
                    upper: lower + len,
                    size,
                },
                offset: offsets.then_some(offset),
            })
            .collect()
    })
}

/// The rows as a file, spelled with the given line end, blank lines and padding.
fn spell(rows: &[Row], crlf: bool, blank_every: usize, pad: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    let sep = if pad { " , " } else { "," };
    let offsets = rows.first().is_some_and(|r| r.offset.is_some());
    let mut text = if offsets {
        format!("id{sep}lower{sep}upper{sep}size{sep}offset{nl}")
    } else {
        format!("id{sep}lower{sep}upper{sep}size{nl}")
    };
    for (k, r) in rows.iter().enumerate() {
        if blank_every > 0 && k % blank_every == 0 {
            text += if pad { "  " } else { "" };
            text += nl;
        }
        let b = r.buffer;
        let mut fields = vec![
            r.id.clone(),
            b.lower.to_string(),
            b.upper.to_string(),
            b.size.to_string(),
        ];
        fields.extend(r.offset.map(|o| o.to_string()));
        text += &fields.join(sep);
        text += nl;
    }
    text
}

/// The (1-based) line an error names, or `None` for an empty text.
fn line_of(e: &CsvError) -> Option<usize> {
    let msg = e.to_string();
    if matches!(e, CsvError::Empty) {
        return None;
    }
    let rest = msg
        .strip_prefix("line ")
        .unwrap_or_else(|| panic!("an error that names no line: {msg}"));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().unwrap_or_else(|_| panic!("{msg}")))
}

/// The ways one buffer line can break the format, and what the error must then say.
const BREAKS: usize = 9;

/// Line `how` of [`BREAKS`] ways to break `row`; `earlier_id` is the id of a row before it
/// (if any) and `earlier_bytes` the sum of their sizes.
fn broken(
    row: &Row,
    earlier_id: Option<&str>,
    earlier_bytes: u64,
    how: usize,
) -> (String, &'static str) {
    let b = row.buffer;
    let id = &row.id;
    let line = |fields: &[String]| fields.join(",");
    let s = |x: u64| x.to_string();
    match how {
        0 => (
            line(&[id.clone(), s(b.lower), s(b.upper)]),
            "expected 4 fields",
        ),
        1 => (
            line(&[id.clone(), s(b.lower), s(b.upper), s(b.size), s(0), s(1)]),
            "expected 4 fields",
        ),
        2 => (
            line(&[
                id.clone(),
                s(b.lower),
                s(b.upper),
                format!("-{}", b.size + 1),
            ]),
            "`size` must be",
        ),
        3 => (
            line(&[id.clone(), format!("{}.5", b.lower), s(b.upper), s(b.size)]),
            "`lower` must be",
        ),
        4 => (
            line(&[
                id.clone(),
                s(b.lower),
                "18446744073709551616".into(),
                s(b.size),
            ]),
            "`upper` must be",
        ),
        5 => (
            line(&[id.clone(), s(b.upper), s(b.lower), s(b.size)]),
            "has lower",
        ),
        6 => (
            line(&[String::new(), s(b.lower), s(b.upper), s(b.size)]),
            "empty id",
        ),
        7 if earlier_bytes > 0 => (
            line(&[id.clone(), s(b.lower), s(b.upper), s(u64::MAX)]),
            "the sizes add up past 64 bits",
        ),
        _ => match earlier_id.filter(|_| how == 8) {
            Some(first) => (
                line(&[first.to_string(), s(b.lower), s(b.upper), s(b.size)]),
                "was already used on line",
            ),
            None => (
                line(&[
                    id.clone(),
                    s(b.lower),
                    s(b.upper),
                    "18446744073709551616".into(),
                ]),
                "`size` must be",
            ),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn valid_lists_round_trip(
        rows in rows(),
        crlf in any::<bool>(),
        blank_every in 0usize..5,
        pad in any::<bool>(),
    ) {
        let text = spell(&rows, crlf, blank_every, pad);
        prop_assert_eq!(&csv::parse(&text).unwrap(), &rows);
        let offsets: Vec<u64> = (0..rows.len() as u64).collect();
        let back = csv::parse(&csv::write(&rows, &offsets)).unwrap();
        prop_assert_eq!(csv::buffers(&back), csv::buffers(&rows));
        for (r, o) in back.iter().zip(&offsets) {
            prop_assert_eq!(r.offset, Some(*o));
        }
    }

    #[test]
    fn mutations_never_panic_and_errors_name_a_line(rows in rows(), seed in any::<u64>()) {
        let text = spell(&rows, seed % 2 == 0, (seed % 4) as usize, seed % 3 == 0);
        let damaged = String::from_utf8_lossy(&mutate_bytes(seed, text.as_bytes())).into_owned();
        if let Err(e) = csv::parse(&damaged) {
            let lines = damaged.split('\n').count();
            match line_of(&e) {
                Some(line) => prop_assert!((1..=lines).contains(&line), "{} of {} lines", e, lines),
                None => prop_assert!(damaged.lines().all(|l| l.trim().is_empty()), "{}", e),
            }
        }
    }

    #[test]
    fn one_broken_line_is_named(rows in rows(), pick in any::<usize>(), how in 0..BREAKS) {
        prop_assume!(!rows.is_empty());
        let rows: Vec<Row> = rows.into_iter().map(|r| Row { offset: None, ..r }).collect();
        let k = pick % rows.len();
        let earlier = (k > 0).then(|| rows[pick % k].id.as_str());
        let earlier_bytes = rows[..k].iter().map(|r| r.buffer.size).sum();
        let (bad, says) = broken(&rows[k], earlier, earlier_bytes, how);
        let mut lines: Vec<String> = spell(&rows, false, 0, false).lines().map(str::to_string).collect();
        lines[k + 1] = bad;
        let text = lines.join("\n") + "\n";
        let e = csv::parse(&text).unwrap_err();
        prop_assert_eq!(line_of(&e), Some(k + 2), "{}", e);
        prop_assert!(e.to_string().contains(says), "{}: should say {:?}", e, says);
        if let (CsvError::DuplicateId { first, .. }, Some(first_id)) = (&e, earlier) {
            let at = rows.iter().position(|r| r.id == first_id).unwrap();
            prop_assert_eq!(*first, at + 2);
        }
    }
}
