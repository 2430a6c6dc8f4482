//! The three named DCQCN settings behave as their sources say, and the
//! unnamed default is not one of them.

use roce_rnic::{CongestionControl, Dcqcn, DcqcnConfig};

const LINE: u64 = 100_000_000_000;

/// Rate after one CNP at t = 0 and the decrease check (4 µs later) that
/// applies it, with whatever alpha updates fall before it.
fn first_cut(cfg: DcqcnConfig) -> u64 {
    let mut d = Dcqcn::new(cfg, LINE);
    d.on_cnp(0);
    while d.rate_bps().is_none() {
        let t = d.next_tick().unwrap();
        assert!(t <= 4_001, "the cut comes at the first decrease check");
        d.on_tick(t);
    }
    d.rate_bps().unwrap()
}

#[test]
fn presets_carry_their_sources_numbers() {
    let p = DcqcnConfig::paper();
    assert_eq!(p.g, 1.0 / 256.0, "Zhu et al. 2015: g = 1/256");
    assert_eq!(
        (p.rp_timer_ns, p.alpha_resume_interval_ns),
        (55_000, 55_000)
    );
    assert_eq!((p.byte_counter, p.fast_recovery_times), (10_000_000, 5));
    assert_eq!(p.rate_ai_bps, 40_000_000);
    let c = DcqcnConfig::connectx();
    assert_eq!(c.g, 5.0 / 1024.0, "dce_tcp_g 1019: g = 1 − 1019/1024");
    assert_eq!(c.alpha_resume_interval_ns, 1_000, "dce_tcp_rtt 1 µs");
    assert_eq!((c.rp_timer_ns, c.byte_counter), (300_000, 32_767));
    assert_eq!((c.rate_ai_bps, c.rate_hai_bps), (5_000_000, 50_000_000));
    assert_eq!((c.min_rate_bps, c.fast_recovery_times), (1_000_000, 1));
    let n = DcqcnConfig::hpcc_ns3();
    assert_eq!(
        (n.g, n.rp_timer_ns, n.byte_counter),
        (1.0 / 16.0, 1_500_000, 0)
    );
    assert_ne!(DcqcnConfig::default(), p, "the default is not the paper's");
    assert_eq!(DcqcnConfig::default().g, 1.0 / 16.0);
    for (name, want) in [("paper", p), ("connectx", c), ("hpcc-ns3", n)] {
        assert_eq!(DcqcnConfig::preset(name), Some(want));
    }
    assert_eq!(DcqcnConfig::preset("mlx"), None);
}

#[test]
fn connectx_first_cut_uses_initial_alpha_and_the_decrease_bound() {
    // The paper: α starts at 1, the first cut halves the rate.
    assert_eq!(first_cut(DcqcnConfig::paper()), LINE / 2);
    // ConnectX: α₀ = initial_alpha_value/1024 = 1023/1024, then four
    // dce_tcp_rtt (1 µs) updates without a CNP, α·(1019/1024) each, before
    // the 4 µs check cuts by α/2 (rpg_gd 11).
    let alpha = 1023.0 / 1024.0 * (1019.0f64 / 1024.0).powi(4);
    let want = LINE as f64 * (1.0 - alpha / 2.0);
    let got = first_cut(DcqcnConfig::connectx()) as f64;
    assert!((got - want).abs() < 2.0, "{got} vs {want}");
    // rpg_gd 10 cuts by α itself, but rpg_min_dec_fac 50 % keeps half.
    let gd10 = DcqcnConfig {
        cut_scale: 1.0,
        ..DcqcnConfig::connectx()
    };
    assert_eq!(first_cut(gd10), LINE / 2);
    // Without the bound, the same cut leaves R·(1 − α), about 2 %.
    let unbounded = DcqcnConfig {
        min_decrease_factor: 0.0,
        ..gd10
    };
    let got = first_cut(unbounded) as f64;
    let want = LINE as f64 * (1.0 - alpha);
    assert!((got - want).abs() < 2.0, "{got} vs {want}");
}
