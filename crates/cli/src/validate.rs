//! `roce validate [--fast] [--out DIR] [--json]`: the congestion-control
//! validation suite of `roce_sim::validate` from the command line. Writes
//! `validation.md` and one plot per check into DIR; with `--json` prints one
//! JSON object whose `checks` array holds every comparison. The exit status
//! is non-zero when any check fails.

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Run the short variants (what `cargo test` runs) instead of the full,
    /// steady-state runs.
    #[arg(long)]
    pub fast: bool,
    /// Directory for validation.md and the plots.
    #[arg(long, default_value = "out/validate")]
    pub out: PathBuf,
    /// Print the checks as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs the suite; `Ok(false)` when a check failed.
pub fn run(a: ValidateArgs) -> Result<bool> {
    let v = roce_sim::validate::run(a.fast, &a.out).context("running the validation suite")?;
    let command = format!(
        "roce validate{} --out {}",
        if a.fast { " --fast" } else { "" },
        a.out.display()
    );
    let md = roce_sim::validate::write_markdown(&v, &a.out, &command)?;
    let mut stdout = std::io::stdout();
    if a.json {
        let _ = writeln!(stdout, "{}", serde_json::to_string(&v)?);
    } else {
        for c in &v.checks {
            let _ = writeln!(
                stdout,
                "{:<30} {:>6}  expected {:<12.4} measured {:<12.4} {}",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.expected,
                c.measured,
                c.unit
            );
        }
        let _ = writeln!(stdout, "wrote {}", md.display());
    }
    Ok(v.passed())
}
