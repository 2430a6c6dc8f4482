//! The RoCEv2 invariant CRC (IBA Annex A17.3.3 "ICRC", with IBA 7.8.1).
//!
//! The ICRC is the Ethernet CRC-32 computed over the packet as if it were an
//! InfiniBand packet whose variant fields are all ones:
//!
//! 1. eight bytes of `0xff` stand in for the (absent) LRH;
//! 2. the IP header with its variant fields set to ones — IPv4: Type of
//!    Service (DSCP+ECN), TTL and header checksum; IPv6: traffic class,
//!    flow label and hop limit. The IPv4 Identification is **not** masked;
//! 3. the UDP header with its checksum set to ones;
//! 4. the BTH with byte 4 (FECN, BECN and the six reserved bits, IBA's
//!    "Resv8a") set to ones;
//! 5. the remaining transport headers, payload and pad, unmodified.
//!
//! The result is stored after the pad in little-endian byte order, exactly as
//! the Ethernet FCS is. Linux's soft-RoCE driver computes the same thing
//! (`drivers/infiniband/sw/rxe/rxe_icrc.c`: it seeds the CRC with the state
//! after eight 0xff bytes, masks `tos`, `ttl`, `check`, the IPv6
//! `priority`/`flow_lbl`/`hop_limit`, the UDP `check`, and the BTH byte that
//! holds FECN/BECN, then stores the complement), and this module is written
//! from that description.

use crate::bth::BTH_LEN;
use crate::udp::UDP_HEADER_LEN;

/// Computes the ICRC.
///
/// `ip_header` is the IPv4 (20 bytes, no options) or IPv6 (40 bytes) header
/// as on the wire; `udp_onwards` starts at the UDP header and runs to the end
/// of the pad, *excluding* the 4 ICRC bytes. Returns the CRC value; its
/// little-endian bytes are what goes on the wire.
pub fn compute(ip_header: &[u8], udp_onwards: &[u8]) -> u32 {
    // The masked prefix and the start of the payload go through the CRC in
    // one contiguous call: crc32fast's folding path needs 64+ bytes, and
    // several short updates would each fall back to the table path.
    let mut buf = [0u8; 192];
    buf[..8].fill(0xff);
    let n = ip_header.len().min(40);
    let ip = &mut buf[8..8 + n];
    ip.copy_from_slice(&ip_header[..n]);
    if n >= 1 && ip[0] >> 4 == 6 {
        ip[0] |= 0x0f;
        if n >= 4 {
            ip[1..4].fill(0xff);
        }
        if n > 7 {
            ip[7] = 0xff;
        }
    } else if n >= 12 {
        ip[1] = 0xff;
        ip[8] = 0xff;
        ip[10] = 0xff;
        ip[11] = 0xff;
    }
    let mut at = 8 + n;
    let take = udp_onwards.len().min(buf.len() - at);
    buf[at..at + take].copy_from_slice(&udp_onwards[..take]);
    if take >= UDP_HEADER_LEN + BTH_LEN {
        buf[at + 6] = 0xff;
        buf[at + 7] = 0xff;
        buf[at + UDP_HEADER_LEN + 4] = 0xff;
    }
    at += take;
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..at]);
    h.update(&udp_onwards[take..]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_fields_do_not_change_the_icrc() {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 17;
        let mut rest = vec![0u8; 8 + 12 + 8];
        rest[2..4].copy_from_slice(&4791u16.to_be_bytes());
        let a = compute(&ip, &rest);
        ip[1] = 0x03; // CE
        ip[8] = 7; // TTL
        ip[10] = 0x12;
        rest[6] = 0x55; // UDP checksum
        rest[8 + 4] = 0x40; // BECN
        assert_eq!(compute(&ip, &rest), a);
        ip[4] = 1; // Identification is invariant
        assert_ne!(compute(&ip, &rest), a);
    }
}
