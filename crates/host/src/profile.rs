//! Hardware profiles: one TOML file describing the hosts at both ends and
//! the fabric between them.
//!
//! ```toml
//! name = "100G on PCIe Gen3 x16"
//! [cpu]    # cores, posting/polling costs
//! [numa]   # sockets, NIC socket, inter-socket link
//! [ddr]    # generation, MT/s, channels
//! [pcie]   # generation, lanes, MPS, MRRS, RCB, read latency, tags
//! [rnic]   # port, message rate, inline, caches, RX buffer
//! [fabric] # leaves, spines, uplinks, switch buffer
//! ```
//!
//! Every mistake — a missing field, an unknown key, a bad type, an unknown
//! PCIe generation, a negative or zero bandwidth — is one
//! [`ProfileError`] naming the file, the line and the field. Lines come
//! from toml's own spans: the deserializer's error span for syntax and
//! schema errors, and the spanned document ([`toml::de::DeTable`]) for
//! values that parse but make no sense.

use crate::cpu::Cpu;
use crate::ddr::Ddr;
use crate::fabric::Fabric;
use crate::numa::Numa;
use crate::pcie::Pcie;
use crate::rnic::Rnic;
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::de::{DeTable, DeValue};

/// A profile that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// `file:line: field: message`.
    #[error("{file}:{line}: {field}: {msg}")]
    Invalid {
        file: String,
        line: usize,
        field: String,
        msg: String,
    },
}

impl ProfileError {
    /// The 1-based line, if the error points into the file.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Invalid { line, .. } => Some(*line),
            Self::Io { .. } => None,
        }
    }

    /// The dotted field path (`pcie.generation`), if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            Self::Io { .. } => None,
        }
    }
}

/// A hardware profile: both hosts (same hardware) and the fabric.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub cpu: Cpu,
    pub numa: Numa,
    pub ddr: Ddr,
    pub pcie: Pcie,
    pub rnic: Rnic,
    pub fabric: Fabric,
}

type Check = Result<(), (&'static str, String)>;

impl Profile {
    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            file: file.clone(),
            source,
        })?;
        Self::from_toml_str(&src, &file)
    }

    /// Parses and validates a profile; `file` names it in errors.
    pub fn from_toml_str(src: &str, file: &str) -> Result<Self, ProfileError> {
        let invalid =
            |span: Option<Range<usize>>, field: String, msg: String| ProfileError::Invalid {
                file: file.to_string(),
                line: span.map_or(1, |s| line_of(src, s.start)),
                field,
                msg,
            };
        let profile: Profile = toml::from_str(src).map_err(|e| {
            let span = e.span();
            let msg = e.message().trim().to_string();
            let doc = DeTable::parse(src).ok();
            let at = match (&doc, &span) {
                // An empty span at 0, or one over the whole document, is
                // the root table.
                (Some(doc), Some(s))
                    if s.end > 0 && !(s.start == 0 && s.end >= src.trim_end().len()) =>
                {
                    path_at(doc.get_ref(), s.start)
                }
                _ => String::new(),
            };
            // Missing/unknown fields name the key in backquotes; the span
            // points at the table (missing) or the key (unknown).
            let field = match backquoted(&msg) {
                Some(k) if msg.starts_with("missing field") => join(&at, k),
                Some(k) if msg.starts_with("unknown field") && !at.ends_with(k) => join(&at, k),
                _ if at.is_empty() => "profile".to_string(),
                _ => at,
            };
            invalid(span, field, msg)
        })?;
        let checks: [(&str, Check); 6] = [
            ("cpu", profile.cpu.validate()),
            ("numa", profile.numa.validate()),
            ("ddr", profile.ddr.validate()),
            ("pcie", profile.pcie.validate()),
            ("rnic", profile.rnic.validate()),
            ("fabric", profile.fabric.validate()),
        ];
        for (section, check) in checks {
            if let Err((field, msg)) = check {
                let span = DeTable::parse(src)
                    .ok()
                    .and_then(|doc| span_of(doc.get_ref(), &[section, field]));
                return Err(invalid(span, format!("{section}.{field}"), msg));
            }
        }
        Ok(profile)
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}.{b}"),
    }
}

fn backquoted(msg: &str) -> Option<&str> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(&msg[start..start + len])
}

/// 1-based line of byte offset `at`.
fn line_of(src: &str, at: usize) -> usize {
    src.as_bytes()[..at.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The span of the value at `path` in a spanned document.
fn span_of(doc: &DeTable<'_>, path: &[&str]) -> Option<Range<usize>> {
    let (first, rest) = path.split_first()?;
    let (key, value) = doc.iter().find(|(k, _)| k.get_ref().as_ref() == *first)?;
    if rest.is_empty() {
        return Some(value.span());
    }
    match value.get_ref() {
        DeValue::Table(t) => span_of(t, rest).or(Some(key.span())),
        _ => Some(value.span()),
    }
}

/// The dotted path of the deepest key whose key or value covers `offset`.
/// A `[table]`'s own span is its header, so children are searched first.
fn path_at(doc: &DeTable<'_>, offset: usize) -> String {
    let covers = |s: Range<usize>| s.start <= offset && offset < s.end.max(s.start + 1);
    for (key, value) in doc.iter() {
        if let DeValue::Table(t) = value.get_ref() {
            let inner = path_at(t, offset);
            if !inner.is_empty() {
                return join(key.get_ref(), &inner);
            }
        }
    }
    doc.iter()
        .find(|(k, v)| covers(k.span()) || covers(v.span()))
        .map(|(k, _)| k.get_ref().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A complete, valid profile used across the crate's tests.
    pub const SAMPLE: &str = r#"name = "test 100G Gen3 x16"

[cpu]
cores_per_socket = 16
post_wqe_ns = 20.0
post_recv_ns = 15.0
doorbell_ns = 100.0
inline_block_ns = 10.0
poll_cqe_ns = 40.0

[numa]
sockets = 2
nic_socket = 0
inter_socket_gbps = 332.8
inter_socket_latency_ns = 60.0

[ddr]
generation = "ddr4"
mt_per_s = 2933.0
channels_per_socket = 6
efficiency = 0.8
latency_ns = 90.0

[pcie]
generation = 3
lanes = 16
mps = 256
mrrs = 512
rcb = 64
completion_split = "rcb"
address_bits = 64
read_latency_ns = 1000.0
max_outstanding_reads = 64

[rnic]
port_gbps = 100.0
message_rate_mpps = 60.0
packet_rate_mpps = 100.0
max_inline_bytes = 220
wqe_bytes = 64
sge_bytes = 16
cqe_bytes = 64
doorbell_bytes = 8
qp_cache_entries = 1024
qp_context_bytes = 256
mr_cache_entries = 16384
mtt_entry_bytes = 8
page_bytes = 4096
context_fetches_outstanding = 8
rx_buffer_kib = 1024

[fabric]
leaves = 4
spines = 8
hosts_per_leaf = 32
uplinks_per_leaf = 8
uplink_gbps = 400.0
switch_buffer_mib = 32.0
switch_latency_ns = 600.0
vlan = false
ipv6 = false
"#;

    pub fn sample() -> Profile {
        Profile::from_toml_str(SAMPLE, "sample.toml").expect("sample profile parses")
    }

    fn err(src: &str) -> (usize, String, String) {
        match Profile::from_toml_str(src, "p.toml") {
            Err(ProfileError::Invalid {
                line,
                field,
                msg,
                file,
            }) => {
                assert_eq!(file, "p.toml");
                (line, field, msg)
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn line_with(src: &str, needle: &str) -> usize {
        src.lines()
            .position(|l| l.starts_with(needle))
            .expect("needle")
            + 1
    }

    #[test]
    fn sample_loads() {
        let p = sample();
        assert_eq!(p.pcie.lanes, 16);
        assert_eq!(p.rnic.port_gbps, 100.0);
    }

    #[test]
    fn unknown_pcie_generation() {
        let src = SAMPLE.replace("generation = 3", "generation = 7");
        let (line, field, msg) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "generation = 7"), "pcie.generation")
        );
        assert!(msg.contains("unknown PCIe generation 7"), "{msg}");
    }

    #[test]
    fn negative_bandwidth() {
        let src = SAMPLE.replace("port_gbps = 100.0", "port_gbps = -100.0");
        let (line, field, msg) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "port_gbps"), "rnic.port_gbps")
        );
        assert!(msg.contains("positive"), "{msg}");
        let src = SAMPLE.replace("uplink_gbps = 400.0", "uplink_gbps = 0.0");
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "uplink_gbps"), "fabric.uplink_gbps")
        );
    }

    #[test]
    fn missing_field() {
        let src = SAMPLE.replace("mrrs = 512\n", "");
        let (line, field, msg) = err(&src);
        assert_eq!(field, "pcie.mrrs", "{msg}");
        assert!(msg.contains("missing field"), "{msg}");
        // The span points into the [pcie] table.
        let pcie = line_with(&src, "[pcie]");
        assert!((pcie..pcie + 10).contains(&line), "line {line}");
    }

    #[test]
    fn unknown_key() {
        let src = SAMPLE.replace("lanes = 16", "lanes = 16\nlane_speed = 3");
        let (line, field, msg) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "lane_speed"), "pcie.lane_speed"),
            "{msg}"
        );
        assert!(msg.contains("unknown field"), "{msg}");
        let src = SAMPLE.replace("[fabric]", "[fabrik]");
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "[fabrik]"), "fabrik")
        );
    }

    #[test]
    fn wrong_type_and_syntax() {
        let src = SAMPLE.replace("lanes = 16", "lanes = \"sixteen\"");
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "lanes"), "pcie.lanes")
        );
        let src = SAMPLE.replace("mps = 256", "mps = = 256");
        let (line, _, _) = err(&src);
        assert_eq!(line, line_with(&src, "mps"));
    }

    #[test]
    fn negative_counts_and_missing_sections() {
        let src = SAMPLE.replace("lanes = 16", "lanes = -16");
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "lanes"), "pcie.lanes")
        );
        let cut = SAMPLE.find("[fabric]").unwrap();
        let (line, field, msg) = err(&SAMPLE[..cut]);
        assert_eq!(field, "fabric", "{msg}");
        assert!(line >= 1);
    }

    #[test]
    fn semantic_errors_point_at_their_line() {
        let src = SAMPLE.replace("nic_socket = 0", "nic_socket = 3");
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (line_with(&src, "nic_socket"), "numa.nic_socket")
        );
        let src = SAMPLE.replace("mps = 256", "mps = 100");
        let (line, field, _) = err(&src);
        assert_eq!((line, field.as_str()), (line_with(&src, "mps"), "pcie.mps"));
    }

    #[test]
    fn io_error_names_the_file() {
        let e = Profile::load(Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/x.toml"), "{e}");
        assert_eq!(e.line(), None);
    }
}
