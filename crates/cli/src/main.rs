//! `roce`: RDMA over Converged Ethernet, real and simulated.

mod alloc;
mod analyze;
mod decode;
mod demo;
mod perf;
mod sim;
mod validate;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "roce",
    version,
    about = "RoCEv2 in software: packets, a software RNIC, captures"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A guided tour: build every packet, run RDMA between two software RNICs, decode the capture.
    Demo {
        /// Directory for the demo's capture files.
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
    },
    /// Work with packet captures.
    Pcap {
        #[command(subcommand)]
        cmd: PcapCmd,
    },
    /// perftest for roce: RDMA bandwidth and latency over real UDP sockets.
    Perf(perf::PerfArgs),
    /// Simulate a RoCEv2 fabric (switches, PFC, ECN, congestion control).
    Sim(sim::SimArgs),
    /// Name the hop that binds a workload, DDR to DDR, on a hardware profile (seed §5.9).
    Analyze(analyze::AnalyzeArgs),
    /// Check the congestion controllers against their papers' models (writes validation.md).
    Validate(validate::ValidateArgs),
}

#[derive(Subcommand)]
enum PcapCmd {
    /// Write a pcap with one correct frame of every RoCEv2 opcode and header layout.
    Sample { file: PathBuf },
    /// Decode every frame of a pcap or pcapng file.
    Decode {
        file: PathBuf,
        /// One JSON object per frame per line.
        #[arg(long)]
        json: bool,
        /// Also decode UDP port N (source or destination) as RoCEv2, like
        /// Wireshark's "Decode As": for a stack that found 4791 busy and
        /// ran on another port. May be given more than once.
        #[arg(long = "udp-port", value_name = "N", value_parser = parse_decode_port)]
        udp_port: Vec<u16>,
    },
}

/// A `--udp-port` for decoding: port 0 is no port a frame is sent to
/// (a socket bound to 0 gets a free one, which `roce perf` prints), so
/// decoding "as port 0" would silently match nothing.
fn parse_decode_port(s: &str) -> std::result::Result<u16, String> {
    match s.parse::<u16>() {
        Ok(0) => Err(
            "port 0 is not a port frames travel on: give the port the stack really used (roce perf prints it)"
                .into(),
        ),
        Ok(p) => Ok(p),
        Err(_) => Err(format!("`{s}` is not a UDP port (1-65535)")),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("roce: {e:#}");
        if e.downcast_ref::<sim::RunsFailed>().is_some() {
            std::process::exit(roce_sim::sweep::EXIT_RUNS_FAILED);
        }
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Demo { out } => demo::run(&out),
        Cmd::Pcap {
            cmd: PcapCmd::Sample { file },
        } => {
            let n = write_sample(&file)?;
            println!("wrote {n} frames to {}", file.display());
            Ok(())
        }
        Cmd::Pcap {
            cmd:
                PcapCmd::Decode {
                    file,
                    json,
                    udp_port,
                },
        } => decode_file(&file, json, &udp_port),
        Cmd::Perf(args) => perf::run(args),
        Cmd::Sim(args) => sim::run(args),
        Cmd::Analyze(args) => analyze::run(args),
        Cmd::Validate(args) => {
            if !validate::run(args)? {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

/// Writes the reference sample capture; returns the frame count.
pub fn write_sample(file: &std::path::Path) -> Result<usize> {
    let frames = roce_wire::sample::sample_frames().context("building sample frames")?;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let f = std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
    let mut w = roce_wire::pcap::CaptureWriter::new(std::io::BufWriter::new(f))?;
    for (i, s) in frames.iter().enumerate() {
        w.write(1_000_000_000 + i as u64 * 1_000, &s.bytes)?;
    }
    w.into_inner().flush()?;
    Ok(frames.len())
}

fn decode_file(file: &std::path::Path, json: bool, ports: &[u16]) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let capture = roce_wire::pcap::read_capture(&bytes)
        .with_context(|| format!("reading capture {}", file.display()))?;
    if let Some(why) = &capture.truncated {
        eprintln!(
            "roce: warning: {} is cut short after {} frames ({why}); decoding those",
            file.display(),
            capture.frames.len()
        );
    }
    let frames = capture.frames;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (i, f) in frames.iter().enumerate() {
        let r = if json {
            writeln!(out, "{}", decode::frame_json(i, f, ports))
        } else {
            writeln!(out, "{}", decode::frame_line(i, f, ports))
        };
        if r.is_err() {
            break; // closed pipe: stop quietly
        }
    }
    let _ = out.flush();
    Ok(())
}
