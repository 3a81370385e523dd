//! Any text: the minimalloc CSV loader returns rows or an error naming a line, never panics;
//! accepted rows write back and reparse to the same buffers, and a small list allocates to a
//! placement the validator accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sgc_plan::alloc::{self, csv, AllocOptions, Effort};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let rows = match csv::parse(text) {
        Ok(rows) => rows,
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with("line ") || matches!(e, csv::CsvError::Empty),
                "an error that names no line: {message}"
            );
            return;
        }
    };
    let back = csv::parse(&csv::write(&rows, &vec![0; rows.len()])).expect("written rows reparse");
    let key = |r: &csv::Row| (r.id.clone(), r.buffer);
    assert_eq!(
        rows.iter().map(key).collect::<Vec<_>>(),
        back.iter().map(key).collect::<Vec<_>>()
    );
    if rows.len() <= 64 {
        let buffers = csv::buffers(&rows);
        let options = AllocOptions {
            effort: Effort::FAST,
            ..AllocOptions::default()
        };
        if let Ok(p) = alloc::allocate(&buffers, &options) {
            assert!(alloc::validate(&buffers, &p, options.align).is_ok());
        }
    }
});
