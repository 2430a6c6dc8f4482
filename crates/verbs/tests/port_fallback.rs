//! A device whose UDP 4791 is taken falls back to a free port, says so, and
//! works there.

mod common;

use common::*;
use roce_verbs::*;
use std::net::{IpAddr, SocketAddr, UdpSocket};

#[test]
fn busy_4791_falls_back_to_a_free_port_that_carries_traffic() {
    let ip: IpAddr = "127.0.41.1".parse().unwrap();
    // Take 4791 on this address; if another process holds it already (a
    // wildcard bind), it is just as busy.
    let _squatter = UdpSocket::bind(SocketAddr::new(ip, ROCE_PORT));
    assert!(
        UdpSocket::bind(SocketAddr::new(ip, ROCE_PORT)).is_err(),
        "4791 should be busy on {ip} now"
    );
    // Asked for exactly 4791, the device refuses with a clear error.
    let e = Device::open_with(SocketAddr::new(ip, ROCE_PORT), EngineConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::AddrInUse(_)), "{e}");
    assert!(e.to_string().contains("already in use"), "{e}");
    // Allowed to fall back, it takes another port and says which.
    let a = Device::open_or_fallback(ip, EngineConfig::default()).unwrap();
    let port = a.local_addr().port();
    assert_ne!(port, ROCE_PORT);
    assert_eq!(a.fallback_port(), Some(port));
    // A device opened where it was asked reports no fallback.
    let b = Device::open_with("127.0.41.2:0".parse().unwrap(), EngineConfig::default()).unwrap();
    assert_eq!(b.fallback_port(), None);

    // And traffic flows between the fallen-back device and its peer.
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (ma, mb) = (
        pa.reg_mr(4096, Access::ALL).unwrap(),
        pb.reg_mr(4096, Access::ALL).unwrap(),
    );
    let qa = pa.qp_builder(&ca).build().unwrap();
    let qb = pb.qp_builder(&cb).build().unwrap();
    let (ea, eb) = (qa.endpoint_with(&ma), qb.endpoint_with(&mb));
    assert_eq!(ea.udp_port, port, "the endpoint carries the fallback port");
    let (qa, _qb) = (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap());
    let _drive_b = b.spawn_progress(false);
    ma.write(0, &pattern(4, 2000)).unwrap();
    qa.post_send(&SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: eb.addr,
            rkey: eb.rkey,
        },
        vec![ma.sge(0, 2000)],
    ))
    .unwrap();
    ok_wc(&ca.wait(1, WAIT).unwrap());
    assert_eq!(mb.read(0, 2000).unwrap(), pattern(4, 2000));
}
