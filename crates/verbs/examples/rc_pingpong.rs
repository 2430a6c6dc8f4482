//! `ibv_rc_pingpong` over roce-verbs: the same options, the same TCP
//! exchange (so it can face rdma-core's own tool on a host with rxe or a
//! RoCE NIC, both using UDP 4791), the same output.
//!
//! ```sh
//! cargo run -p roce-verbs --example rc_pingpong                    # server, device 127.0.0.1
//! cargo run -p roce-verbs --example rc_pingpong -- 127.0.0.1       # client, device 127.0.0.2
//! ```
//!
//! Each side posts `-r` receives, the client sends a `-s`-byte SEND, and
//! each receive is answered by a send until both sides have sent and
//! received `-n` messages. What differs from rdma-core: `-d` names a local
//! IP address (the device), the GID is sent even without `-g`, and
//! `--udp-port` moves both ends off 4791 (e.g. when another stack owns it).

mod common;

use clap::Parser;
use common::*;
use roce_verbs::pingpong::Dest;
use roce_verbs::{Access, Endpoint, Mtu, QpBuilder, RecvWr, SendWr, WrOpcode};
use std::net::IpAddr;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "rc_pingpong",
    about = "RC ping-pong over roce-verbs (as ibv_rc_pingpong)"
)]
struct Opts {
    #[command(flatten)]
    c: Common,
    /// size of message to exchange
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: u32,
    /// path MTU
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
}

fn main() {
    let o = Opts::parse();
    o.c.check();
    let mtu = Mtu::from_bytes(o.mtu).unwrap_or_else(|| {
        fail(format!(
            "-m {}: path MTU is 256, 512, 1024, 2048 or 4096",
            o.mtu
        ))
    });
    if o.size == 0 {
        fail("-s must be at least 1");
    }
    let server = o.c.server_addr();
    let ctx = o.c.open(server);
    let pd = ctx
        .alloc_pd()
        .unwrap_or_else(|e| fail(format!("Couldn't allocate PD: {e}")));
    let mr = pd
        .reg_mr(o.size as usize, Access::LOCAL_WRITE)
        .unwrap_or_else(|e| fail(format!("Couldn't register MR: {e}")));
    // rdma-core fills the buffer with 0x7b.
    mr.write(0, &vec![0x7b; o.size as usize])
        .unwrap_or_else(|e| fail(e));
    let cq = ctx
        .create_cq(o.c.rx_depth + 1)
        .unwrap_or_else(|e| fail(format!("Couldn't create CQ: {e}")));
    let max_inline = 64;
    let qp = QpBuilder::new(&pd, &cq)
        .max_send_wr(1)
        .max_recv_wr(o.c.rx_depth)
        .max_sge(1)
        .max_inline_data(max_inline)
        .access(Access::NONE)
        .mtu(mtu)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .min_rnr_timer(12)
        .max_rd_atomic(1)
        .build()
        .unwrap_or_else(|e| fail(format!("Couldn't create QP: {e}")));
    let inline = o.size <= max_inline;

    let recv_wr = RecvWr {
        wr_id: RECV_WRID,
        sg_list: vec![mr.sge(0, o.size)],
    };
    let recvs = |n: u32| vec![recv_wr.clone(); n as usize];
    qp.post_recv_batch(&recvs(o.c.rx_depth))
        .unwrap_or_else(|e| fail(format!("Couldn't post receive: {e}")));
    let mut routs = o.c.rx_depth;

    let my = my_dest(&ctx, qp.qpn(), qp.endpoint().psn);
    print_dest("local address: ", &my, ",");
    let mut prepared = Some(qp);
    let mut connected = None;
    let mut connect = |rem: &Dest, from: Option<IpAddr>| {
        let peer = peer_addr(rem, from, o.c.udp_port);
        // A peer of the other IP family is refused by connect(), clearly.
        let endpoint = Endpoint {
            ip: peer.ip(),
            udp_port: peer.port(),
            qpn: rem.qpn,
            psn: rem.psn,
            mtu: mtu.bytes(),
            addr: 0,
            len: 0,
            rkey: 0,
        };
        if let Some(p) = prepared.take() {
            connected = Some(
                p.connect(&endpoint)
                    .unwrap_or_else(|e| fail(format!("Couldn't connect to remote QP: {e}"))),
            );
        }
    };
    // The server connects its QP inside the exchange, before it answers,
    // so the client's first SEND finds it ready.
    let rem =
        o.c.exchange(server, &my, |rem, from| connect(rem, Some(from)));
    print_dest("remote address:", &rem, ",");
    connect(&rem, server.map(|s| s.ip()));
    let Some(qp) = connected else {
        fail("Couldn't connect to remote QP")
    };
    let is_client = server.is_some();

    let post_send = |k: u32| {
        if o.c.chk {
            mr.write(0, &vec![chk_byte(k); o.size as usize])
                .unwrap_or_else(|e| fail(e));
        }
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send, vec![mr.sge(0, o.size)]);
        if inline {
            wr = wr.inline();
        }
        qp.post_send(&wr)
            .unwrap_or_else(|e| fail(format!("Couldn't post send: {e}")));
    };

    let mut pending = RECV_WRID;
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let start = Instant::now();
    if is_client {
        post_send(0);
        pending |= SEND_WRID;
    }
    while rcnt < o.c.iters || scnt < o.c.iters {
        for wc in next_completions(&cq, o.c.events) {
            check_status(&wc);
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if o.c.chk {
                        let want = chk_byte(rcnt);
                        let ok = mr
                            .with_bytes(0, o.size as usize, |b| b.iter().all(|&x| x == want))
                            .unwrap_or(false);
                        if !ok {
                            fail(format!("message {rcnt}: received buffer does not match"));
                        }
                    }
                    routs -= 1;
                    if routs <= 1 {
                        qp.post_recv_batch(&recvs(o.c.rx_depth - routs))
                            .unwrap_or_else(|e| {
                                fail(format!("Couldn't post receive ({routs}): {e}"))
                            });
                        routs = o.c.rx_depth;
                    }
                    rcnt += 1;
                }
                other => fail(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !wc.wr_id;
            if scnt < o.c.iters && pending == 0 {
                post_send(scnt);
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    report(o.size, o.c.iters, start.elapsed());
}
