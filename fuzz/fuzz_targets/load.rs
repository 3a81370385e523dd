//! Any text: the loader returns a graph or an error, never panics; an error locates its cause
//! (a line and column inside the text, or names the document has); an accepted graph saves
//! and reloads to an equal graph and identical text, and its memory profile can be taken.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sgc_ir::testgen::check_error_locates;
use sgc_ir::{format, parse_any};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_any(text) {
        Ok(graph) => {
            let saved = format::to_string(&graph);
            let back = format::from_str(&saved).expect("a saved graph reloads");
            assert_eq!(back, graph);
            assert_eq!(format::to_string(&back), saved);
            assert!(graph.lower_bound().bytes <= graph.memory_profile().peak);
        }
        Err(e) => check_error_locates(&e, text),
    }
});
