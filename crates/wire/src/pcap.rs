//! Capture files: a classic-pcap writer (Ethernet link type, nanosecond
//! timestamps) shared by the UDP engine and the simulator, and a reader that
//! takes both pcap and pcapng.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};
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
            endianness: Endianness::Little,
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

/// What was read from a capture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capture {
    pub frames: Vec<CapturedFrame>,
    /// Set when the file ends mid-record or a later block is damaged: the
    /// frames before it are still returned, as Wireshark shows them.
    pub truncated: Option<String>,
}

/// Nanoseconds for `ticks` at a pcapng `if_tsresol` (default 6, microseconds).
fn pcapng_ns(ticks: u128, tsresol: u8) -> u64 {
    let v = if tsresol & 0x80 != 0 {
        let shift = u32::from(tsresol & 0x7f).min(127);
        (ticks * 1_000_000_000) >> shift
    } else {
        let e = u32::from(tsresol);
        if e <= 9 {
            ticks * 10u128.pow(9 - e)
        } else {
            ticks / 10u128.pow((e - 9).min(38))
        }
    };
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Reads every frame of a pcap or pcapng capture held in memory. Fails only
/// when the file is not a capture at all (bad magic or header).
pub fn read_capture(bytes: &[u8]) -> Result<Capture, PcapError> {
    let mut magic = [0u8; 4];
    if bytes.len() >= 4 {
        magic.copy_from_slice(&bytes[..4]);
    }
    let mut out = Capture::default();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(bytes)?;
        // Interfaces as they are described; the section header's own is implicit.
        let mut tsresol: Vec<u8> = Vec::new();
        while let Some(block) = r.next_block() {
            let block = match block {
                Ok(b) => b,
                Err(e) => {
                    out.truncated = Some(e.to_string());
                    break;
                }
            };
            match block {
                Block::InterfaceDescription(idb) => {
                    let res = idb
                        .options
                        .iter()
                        .find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                            _ => None,
                        })
                        .unwrap_or(6);
                    tsresol.push(res);
                }
                Block::EnhancedPacket(p) => {
                    let res = tsresol.get(p.interface_id as usize).copied().unwrap_or(6);
                    out.frames.push(CapturedFrame {
                        ts_ns: pcapng_ns(p.timestamp.as_nanos(), res),
                        data: p.data.into_owned(),
                    })
                }
                Block::SimplePacket(p) => out.frames.push(CapturedFrame {
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
            match p {
                Ok(p) => out.frames.push(CapturedFrame {
                    ts_ns: p.timestamp.as_nanos() as u64,
                    data: p.data.into_owned(),
                }),
                Err(e) => {
                    out.truncated = Some(e.to_string());
                    break;
                }
            }
        }
    } else {
        return Err(PcapError::BadMagic(magic));
    }
    Ok(out)
}

/// Reads a capture from any reader.
pub fn read_capture_from(mut r: impl Read) -> Result<Capture, PcapError> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf)?;
    read_capture(&buf)
}
