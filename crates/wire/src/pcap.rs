//! Capture files: a classic-pcap writer (Ethernet link type, nanosecond
//! timestamps) shared by the UDP engine and the simulator, and a reader that
//! takes both pcap and pcapng.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use std::io::{Read, Write};
use std::time::Duration;

/// Why a capture could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("capture I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("capture format: {0}")]
    Format(#[from] pcap_file::PcapError),
    #[error("not a pcap or pcapng file (magic {0:02x?})")]
    BadMagic([u8; 4]),
}

/// Writes Ethernet frames to a classic pcap with nanosecond timestamps.
pub struct CaptureWriter<W: Write> {
    inner: PcapWriter<W>,
}

impl<W: Write> CaptureWriter<W> {
    pub fn new(w: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            ts_resolution: TsResolution::NanoSecond,
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        Ok(CaptureWriter {
            inner: PcapWriter::with_header(w, header)?,
        })
    }

    /// Appends one frame stamped `ts_ns` nanoseconds after the epoch.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        let pkt = PcapPacket::new(Duration::from_nanos(ts_ns), frame.len() as u32, frame);
        self.inner.write_packet(&pkt)?;
        Ok(())
    }

    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    pub ts_ns: u64,
    pub data: Vec<u8>,
}

/// Reads every frame of a pcap or pcapng capture held in memory.
pub fn read_capture(bytes: &[u8]) -> Result<Vec<CapturedFrame>, PcapError> {
    let mut magic = [0u8; 4];
    if bytes.len() >= 4 {
        magic.copy_from_slice(&bytes[..4]);
    }
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(bytes)?;
        while let Some(block) = r.next_block() {
            match block? {
                Block::EnhancedPacket(p) => out.push(CapturedFrame {
                    ts_ns: p.timestamp.as_nanos() as u64,
                    data: p.data.into_owned(),
                }),
                Block::SimplePacket(p) => out.push(CapturedFrame {
                    ts_ns: 0,
                    data: p.data.into_owned(),
                }),
                _ => {}
            }
        }
    } else if matches!(
        magic,
        [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d]
    ) {
        let mut r = PcapReader::new(bytes)?;
        while let Some(p) = r.next_packet() {
            let p = p?;
            out.push(CapturedFrame {
                ts_ns: p.timestamp.as_nanos() as u64,
                data: p.data.into_owned(),
            });
        }
    } else {
        return Err(PcapError::BadMagic(magic));
    }
    Ok(out)
}

/// Reads a capture from any reader.
pub fn read_capture_from(mut r: impl Read) -> Result<Vec<CapturedFrame>, PcapError> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf)?;
    read_capture(&buf)
}
