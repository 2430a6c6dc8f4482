//! `roce perf`: perftest for roce (being built; see issue 4).

use anyhow::{Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct PerfArgs {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat, atomic_lat
    pub test: String,
    /// Server to connect to; without it, listen.
    pub server: Option<String>,
}

pub fn run(_args: PerfArgs) -> Result<()> {
    bail!("roce perf is not built yet")
}
