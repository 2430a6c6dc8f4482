//! `roce pcap decode`: one line (or one JSON object) per captured frame.

use roce_wire::pcap::CapturedFrame;
use roce_wire::{Frame, IpRepr, RoceFrame, Syndrome, parse_frame_ports};
use serde_json::{Map, Value, json};

/// Decodes one frame into a JSON object whose nested keys follow the header
/// names (`bth.opcode`, `reth.rkey`, `aeth.kind`, `icrc.ok`, …). Each field
/// is there twice: inside its header's object (`{"bth": {"opcode": 4}}`, for
/// `jq .bth.opcode`) and under its full dotted name at the top level
/// (`"bth.opcode": 4`), for tools that look fields up by name the way
/// tshark's field names work.
///
/// `ports` are UDP ports decoded as RoCEv2 besides 4791 (Wireshark's
/// "Decode As"; see [`roce_wire::parse_frame_ports`]).
pub fn frame_json(index: usize, f: &CapturedFrame, ports: &[u16]) -> Value {
    let Value::Object(nested) = frame_json_nested(index, f, ports) else {
        unreachable!("frame_json_nested builds an object")
    };
    let mut flat = Map::new();
    for (k, v) in &nested {
        flatten(k, v, &mut flat);
    }
    let mut out = nested;
    for (k, v) in flat {
        out.entry(k).or_insert(v);
    }
    Value::Object(out)
}

/// Adds `prefix.key` entries for every leaf under `v` (objects only; arrays
/// stay whole).
fn flatten(prefix: &str, v: &Value, out: &mut Map<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, inner) in m {
                flatten(&format!("{prefix}.{k}"), inner, out);
            }
        }
        leaf => {
            if prefix.contains('.') {
                out.insert(prefix.to_string(), leaf.clone());
            }
        }
    }
}

fn frame_json_nested(index: usize, f: &CapturedFrame, ports: &[u16]) -> Value {
    let mut o = Map::new();
    o.insert("frame".into(), json!(index + 1));
    o.insert("ts_ns".into(), json!(f.ts_ns));
    o.insert("len".into(), json!(f.data.len()));
    match parse_frame_ports(&f.data, ports) {
        Err(e) => {
            o.insert("error".into(), json!(e.to_string()));
        }
        Ok(Frame::Pfc { eth, pfc }) => {
            o.insert("eth".into(), json!(eth));
            o.insert(
                "pfc".into(),
                json!({
                    "class_enable": pfc.class_enable,
                    "quanta": pfc.quanta,
                    "paused_priorities": (0..8u8).filter(|p| pfc.class_enable & (1 << p) != 0 && pfc.quanta[*p as usize] > 0).collect::<Vec<_>>(),
                }),
            );
        }
        Ok(Frame::Roce(r)) => roce_json(&r, &mut o),
    }
    Value::Object(o)
}

fn roce_json(r: &RoceFrame<'_>, o: &mut Map<String, Value>) {
    o.insert("eth".into(), json!(r.eth));
    let ip = match &r.ip {
        IpRepr::V4(ip) => json!({
            "version": 4, "src": ip.src.to_string(), "dst": ip.dst.to_string(),
            "dscp": ip.dscp, "ecn": ip.ecn, "id": ip.ident, "df": ip.dont_frag,
            "ttl": ip.ttl, "checksum_ok": r.ip_checksum_ok,
        }),
        IpRepr::V6(ip) => json!({
            "version": 6, "src": ip.src.to_string(), "dst": ip.dst.to_string(),
            "dscp": ip.dscp, "ecn": ip.ecn, "flow_label": ip.flow_label, "hop_limit": ip.hop_limit,
        }),
    };
    o.insert("ip".into(), ip);
    o.insert(
        "udp".into(),
        json!({"src_port": r.udp.src_port, "dst_port": r.udp.dst_port, "checksum": r.udp.checksum}),
    );
    let t = &r.transport;
    let b = &t.bth;
    o.insert(
        "bth".into(),
        json!({
            "opcode": b.opcode.to_u8(), "opcode_name": b.opcode.name(),
            "se": b.solicited, "m": b.mig_req, "pad_count": b.pad_count, "tver": b.tver,
            "pkey": b.pkey, "fecn": b.fecn, "becn": b.becn, "dest_qp": b.dest_qp,
            "ack_req": b.ack_req, "psn": b.psn.value(),
        }),
    );
    if let Some(d) = &t.deth {
        o.insert("deth".into(), json!({"qkey": d.qkey, "src_qp": d.src_qp}));
    }
    if let Some(x) = &t.reth {
        o.insert(
            "reth".into(),
            json!({"va": x.va, "rkey": x.rkey, "dma_len": x.dma_len}),
        );
    }
    if let Some(x) = &t.atomic_eth {
        o.insert(
            "atomic_eth".into(),
            json!({"va": x.va, "rkey": x.rkey, "swap_add": x.swap_add, "compare": x.compare}),
        );
    }
    if let Some(a) = &t.aeth {
        let mut m = Map::new();
        m.insert("syndrome".into(), json!(a.syndrome.to_u8()));
        m.insert("kind".into(), json!(a.syndrome.kind()));
        m.insert("msn".into(), json!(a.msn));
        match a.syndrome {
            Syndrome::Ack { credits } => {
                m.insert("credits".into(), json!(credits));
            }
            Syndrome::RnrNak { timer } => {
                m.insert("rnr_timer_code".into(), json!(timer));
                m.insert("rnr_timer_us".into(), json!(a.syndrome.rnr_timer_us()));
            }
            Syndrome::Nak(code) => {
                m.insert("nak_code".into(), json!(code.to_u8()));
                m.insert("nak_name".into(), json!(code.name()));
            }
            Syndrome::Reserved(_) => {}
        }
        o.insert("aeth".into(), Value::Object(m));
    }
    if let Some(x) = &t.atomic_ack_eth {
        o.insert("atomic_ack_eth".into(), json!({"orig": x.orig}));
    }
    if let Some(v) = t.immdt {
        o.insert("immdt".into(), json!(v));
    }
    if let Some(v) = t.ieth {
        o.insert("ieth".into(), json!({"rkey": v}));
    }
    o.insert("payload_len".into(), json!(r.payload.len()));
    o.insert(
        "icrc".into(),
        json!({"ok": r.icrc_ok(), "wire": r.icrc_wire, "computed": r.icrc_computed}),
    );
}

/// A Wireshark-like one-line summary of a frame (`ports` as for [`frame_json`]).
pub fn frame_line(index: usize, f: &CapturedFrame, ports: &[u16]) -> String {
    let t = format!("{:>5} {:>12.9}", index + 1, f.ts_ns as f64 / 1e9);
    match parse_frame_ports(&f.data, ports) {
        Err(e) => format!("{t} {:>5}  [not RoCEv2: {e}]", f.data.len()),
        Ok(Frame::Pfc { eth, pfc }) => format!(
            "{t} {:>5}  {} → {}  PFC  enable=0x{:02x} quanta={:?}",
            f.data.len(),
            eth.src,
            eth.dst,
            pfc.class_enable,
            pfc.quanta
        ),
        Ok(Frame::Roce(r)) => {
            let (src, dst) = match &r.ip {
                IpRepr::V4(ip) => (ip.src.to_string(), ip.dst.to_string()),
                IpRepr::V6(ip) => (ip.src.to_string(), ip.dst.to_string()),
            };
            let tr = &r.transport;
            let mut s = format!(
                "{t} {:>5}  {src} → {dst}  RRoCE {} QP=0x{:06x} PSN={}{}",
                f.data.len(),
                tr.bth.opcode.name(),
                tr.bth.dest_qp,
                tr.bth.psn,
                if tr.bth.ack_req { " A" } else { "" }
            );
            if r.ip.ecn() == 3 {
                s.push_str(" CE");
            }
            if tr.bth.becn {
                s.push_str(" BECN");
            }
            if let Some(x) = &tr.reth {
                s.push_str(&format!(
                    " VA=0x{:x} R_Key=0x{:x} len={}",
                    x.va, x.rkey, x.dma_len
                ));
            }
            if let Some(x) = &tr.atomic_eth {
                s.push_str(&format!(
                    " VA=0x{:x} R_Key=0x{:x} swap/add={} cmp={}",
                    x.va, x.rkey, x.swap_add, x.compare
                ));
            }
            if let Some(a) = &tr.aeth {
                match a.syndrome {
                    Syndrome::Ack { credits } => s.push_str(&format!(" ACK credits={credits}")),
                    Syndrome::RnrNak { .. } => s.push_str(&format!(
                        " RNR-NAK timer={}us",
                        a.syndrome.rnr_timer_us().unwrap_or(0)
                    )),
                    Syndrome::Nak(c) => s.push_str(&format!(" NAK {}", c.name())),
                    Syndrome::Reserved(v) => s.push_str(&format!(" syndrome=0x{v:02x}")),
                }
                s.push_str(&format!(" MSN={}", a.msn));
            }
            if let Some(x) = &tr.atomic_ack_eth {
                s.push_str(&format!(" orig={}", x.orig));
            }
            if let Some(d) = &tr.deth {
                s.push_str(&format!(" Q_Key=0x{:x} SrcQP=0x{:x}", d.qkey, d.src_qp));
            }
            if let Some(v) = tr.immdt {
                s.push_str(&format!(" imm=0x{v:08x}"));
            }
            if let Some(v) = tr.ieth {
                s.push_str(&format!(" inv_rkey=0x{v:x}"));
            }
            s.push_str(&format!(" payload={}", r.payload.len()));
            if !r.icrc_ok() {
                s.push_str(&format!(
                    " [ICRC BAD: wire 0x{:08x} computed 0x{:08x}]",
                    r.icrc_wire, r.icrc_computed
                ));
            }
            s
        }
    }
}
