//! The allocator settings compiled into `roce` (`crates/cli/src/alloc.rs`)
//! are the ones jemalloc runs with: its symbols carry the `_rjem_` prefix,
//! and an option string under any other name would be ignored without a
//! word (session 32 timed such a setting that never took effect).

use std::process::Command;

#[test]
fn jemalloc_runs_with_the_compiled_in_options() {
    // `stats_print` (read from the environment, after the compiled-in
    // string) makes jemalloc print its options at exit; it sets nothing
    // else, so the other options printed are the binary's own.
    let out = Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("run roce");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    for want in [
        "opt.thp: \"always\"",
        "opt.metadata_thp: \"always\"",
        "opt.dirty_decay_ms: -1 ",
        "opt.muzzy_decay_ms: -1 ",
    ] {
        assert!(
            text.contains(want),
            "jemalloc's statistics lack {want:?}:\n{}",
            &text[..text.len().min(4000)]
        );
    }
}
