//! `roce sim`: the fabric simulator (being built; see issue 5).

use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML).
    pub scenario: Option<PathBuf>,
}

pub fn run(_args: SimArgs) -> Result<()> {
    bail!("roce sim is not built yet")
}
