//! Instruction cost per message through two RNICs with no I/O, for
//! `valgrind --tool=callgrind` (stable counts on a busy machine):
//!
//! ```sh
//! cargo build --release -p roce-rnic --example cost
//! valgrind --tool=callgrind target/release/examples/cost write 20000
//! valgrind --tool=callgrind target/release/examples/cost send 20000
//! ```
//! Divide the reported instructions by the message count (the set-up is
//! also printed by a run with a count of 0).

use roce_rnic::pair::{LinkConfig, Pair, RcOptions, shuttle};
use roce_rnic::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "write".into());
    let n: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let mut p = Pair::new(LinkConfig::default());
    let o = RcOptions {
        buf_len: 1 << 20,
        mtu: Mtu::Mtu4096,
        max_send_wr: 1024,
        max_recv_wr: 1024,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).expect("connect");
    let batch = 64;
    let mut sent = 0;
    while sent < n {
        let k = batch.min(n - sent);
        let wrs: Vec<SendWr> = (0..k)
            .map(|i| {
                let (op, len) = if kind == "send" {
                    (WrOpcode::Send, 64)
                } else {
                    (
                        WrOpcode::RdmaWrite {
                            remote_addr: b.buf + i * 4096,
                            rkey: b.mr.rkey,
                        },
                        4096,
                    )
                };
                let w = SendWr::new(i, op, vec![a.sge(i * 4096, len)]);
                if i + 1 == k { w } else { w.unsignaled() }
            })
            .collect();
        if kind == "send" {
            let recvs: Vec<RecvWr> = (0..k)
                .map(|i| RecvWr {
                    wr_id: i,
                    sg_list: vec![b.sge(i * 64, 64)],
                })
                .collect();
            p.b.post_recv(b.qpn, &recvs).expect("post_recv");
        }
        p.a.post_send(a.qpn, &wrs).expect("post_send");
        shuttle(&mut p.a, &mut p.b, 0);
        let _ = p.a.poll_cq(a.cq, 2 * batch as usize);
        let _ = p.b.poll_cq(b.cq, 2 * batch as usize);
        sent += k;
    }
    let c = p.a.counters();
    println!(
        "{kind}: {n} messages, {} packets sent by A, {} by B",
        c.tx_pkts,
        p.b.counters().tx_pkts
    );
}
