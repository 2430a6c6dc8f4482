//! `ibv_ud_pingpong` over roce-verbs: UD SENDs of one datagram each, with a
//! 40-byte GRH area at the head of every receive buffer and Q_Key
//! 0x11111111, the same options, TCP exchange and output as rdma-core's.
//!
//! ```sh
//! cargo run -p roce-verbs --example ud_pingpong                    # server, device 127.0.0.1
//! cargo run -p roce-verbs --example ud_pingpong -- 127.0.0.1       # client, device 127.0.0.2
//! ```
//!
//! UD is never segmented, so `-s` may not exceed the port's active MTU
//! (4096 on lo, 1024 on a 1500-byte Ethernet). The differences from
//! rdma-core are those of `rc_pingpong` (`-d` is a local IP address, the
//! GID is always sent, `--udp-port`).

mod common;

use clap::Parser;
use common::*;
use roce_verbs::{Access, QpType, RecvWr, SendWr, WrOpcode};
use std::time::Instant;

/// The Q_Key both sides use (rdma-core's ud_pingpong).
const QKEY: u32 = 0x1111_1111;
/// The GRH area at the head of a UD receive buffer.
const GRH: u32 = 40;

#[derive(Parser, Debug)]
#[command(
    name = "ud_pingpong",
    about = "UD ping-pong over roce-verbs (as ibv_ud_pingpong)"
)]
struct Opts {
    #[command(flatten)]
    c: Common,
    /// size of message to exchange
    #[arg(short = 's', long = "size", default_value_t = 2048)]
    size: u32,
}

fn main() {
    let o = Opts::parse();
    o.c.check();
    if o.size == 0 {
        fail("-s must be at least 1");
    }
    let server = o.c.server_addr();
    let ctx = o.c.open(server);
    let mtu = ctx.active_mtu().bytes();
    if o.size > mtu {
        fail(format!("Requested size larger than port MTU ({mtu})"));
    }
    let pd = ctx
        .alloc_pd()
        .unwrap_or_else(|e| fail(format!("Couldn't allocate PD: {e}")));
    let len = (o.size + GRH) as usize;
    let mr = pd
        .reg_mr(len, Access::LOCAL_WRITE)
        .unwrap_or_else(|e| fail(format!("Couldn't register MR: {e}")));
    mr.write(0, &vec![0x7b; len]).unwrap_or_else(|e| fail(e));
    let cq = ctx
        .create_cq(o.c.rx_depth + 1)
        .unwrap_or_else(|e| fail(format!("Couldn't create CQ: {e}")));
    let qp = pd
        .qp_builder(&cq)
        .qp_type(QpType::Ud)
        .qkey(QKEY)
        .max_send_wr(1)
        .max_recv_wr(o.c.rx_depth)
        .max_sge(1)
        .build()
        .unwrap_or_else(|e| fail(format!("Couldn't create QP: {e}")));
    let recv_wr = RecvWr {
        wr_id: RECV_WRID,
        sg_list: vec![mr.sge(0, o.size + GRH)],
    };
    let recvs = |n: u32| vec![recv_wr.clone(); n as usize];
    qp.post_recv_batch(&recvs(o.c.rx_depth))
        .unwrap_or_else(|e| fail(format!("Couldn't post receive: {e}")));
    let mut routs = o.c.rx_depth;
    let my = my_dest(&ctx, qp.qpn(), qp.endpoint().psn);
    // A UD QP needs no peer to reach RTS.
    let qp = qp
        .activate()
        .unwrap_or_else(|e| fail(format!("Failed to modify QP to RTS: {e}")));
    // rdma-core's ud_pingpong prints a colon after the local PSN.
    print_dest("local address: ", &my, ":");
    let mut tcp_from = None;
    let rem = o.c.exchange(server, &my, |_, from| tcp_from = Some(from));
    print_dest("remote address:", &rem, ",");
    let peer = peer_addr(&rem, tcp_from.or(server.map(|s| s.ip())), o.c.udp_port);
    let ah = pd
        .create_ah(peer)
        .unwrap_or_else(|e| fail(format!("Failed to create AH: {e}")));
    let dest = ah.dest(rem.qpn, QKEY);

    let post_send = |k: u32| {
        if o.c.chk {
            mr.write(GRH as usize, &vec![chk_byte(k); o.size as usize])
                .unwrap_or_else(|e| fail(e));
        }
        let wr = SendWr::new(
            SEND_WRID,
            WrOpcode::Send,
            vec![mr.sge(GRH as usize, o.size)],
        )
        .to(dest);
        qp.post_send(&wr)
            .unwrap_or_else(|e| fail(format!("Couldn't post send: {e}")));
    };

    let mut pending = RECV_WRID;
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let start = Instant::now();
    if server.is_some() {
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
                        let ok = wc.byte_len == o.size + GRH
                            && mr
                                .with_bytes(GRH as usize, o.size as usize, |b| {
                                    b.iter().all(|&x| x == want)
                                })
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
