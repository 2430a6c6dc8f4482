//! `roce demo`: the README's main job.

use anyhow::Result;
use std::path::Path;

pub fn run(out: &Path) -> Result<()> {
    let file = out.join("sample.pcap");
    let n = crate::write_sample(&file)?;
    println!("== 1. Every RoCEv2 packet layout, byte-exact ==");
    println!(
        "wrote {n} frames to {} (open it in Wireshark)\n",
        file.display()
    );
    let bytes = std::fs::read(&file)?;
    for (i, f) in roce_wire::pcap::read_capture(&bytes)?
        .frames
        .iter()
        .enumerate()
    {
        println!("{}", crate::decode::frame_line(i, f));
    }
    Ok(())
}
