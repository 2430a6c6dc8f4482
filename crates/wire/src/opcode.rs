//! The BTH opcode table (IBA 9.2.1 Table 35, plus RoCEv2 Annex A17's CNP).
//!
//! One macro invocation lists every opcode with its name, the extension
//! headers it carries (in wire order) and whether it has a payload. Parsing,
//! emitting, the decoder and the RNIC all read this one table, so they cannot
//! disagree about a layout.

use serde::{Serialize, Serializer};

/// Set of extension headers that follow the BTH, in the fixed IBA order
/// DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (then CNP padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u8);

impl Headers {
    pub const EMPTY: Headers = Headers(0);
    pub const DETH: Headers = Headers(1 << 0);
    pub const RETH: Headers = Headers(1 << 1);
    pub const ATOMIC_ETH: Headers = Headers(1 << 2);
    pub const AETH: Headers = Headers(1 << 3);
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 4);
    pub const IMMDT: Headers = Headers(1 << 5);
    pub const IETH: Headers = Headers(1 << 6);
    /// The 16 reserved bytes of a RoCEv2 CNP (Annex A17.9.3).
    pub const CNP_PAD: Headers = Headers(1 << 7);

    /// `self` plus `other`.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }
    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }
    /// Total length in bytes of the headers in this set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        if self.contains(Headers::DETH) {
            n += 8;
        }
        if self.contains(Headers::RETH) {
            n += 16;
        }
        if self.contains(Headers::ATOMIC_ETH) {
            n += 28;
        }
        if self.contains(Headers::AETH) {
            n += 4;
        }
        if self.contains(Headers::ATOMIC_ACK_ETH) {
            n += 8;
        }
        if self.contains(Headers::IMMDT) {
            n += 4;
        }
        if self.contains(Headers::IETH) {
            n += 4;
        }
        if self.contains(Headers::CNP_PAD) {
            n += 16;
        }
        n
    }
    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Transport service an opcode belongs to (its top three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Transport {
    Rc,
    Uc,
    Rd,
    Ud,
    /// RoCEv2 congestion notification (0x80 block).
    Cnp,
    Other,
}

/// What an opcode looks like on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Name as IBA and rdma-core spell it, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    /// Extension headers after the BTH.
    pub headers: Headers,
    /// Whether data follows the headers.
    pub payload: bool,
}

macro_rules! opcodes {
    ($( $variant:ident = $code:literal, $name:literal, [$($h:ident),*], $payload:literal; )*) => {
        /// A BTH opcode. Codes without a layout here stay [`Opcode::Unknown`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Opcode {
            $( $variant, )*
            Unknown(u8),
        }

        /// [`Opcode::from_u8`] of every byte.
        const OPCODE_OF_BYTE: [Opcode; 256] = {
            let mut t = [Opcode::Unknown(0); 256];
            let mut i = 0;
            while i < 256 {
                t[i] = Opcode::decode(i as u8);
                i += 1;
            }
            t
        };

        impl Opcode {
            /// Every opcode this implementation knows.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$variant ),* ];

            /// Decodes the opcode byte: one load from a table built at
            /// compile time. The `match` it replaces compiled to a jump
            /// table whose indirect branch mispredicted about once per
            /// packet a simulated host received (its data and ACKs
            /// interleave), and was not inlined across crates (issue 12).
            #[inline]
            pub const fn from_u8(v: u8) -> Opcode {
                OPCODE_OF_BYTE[v as usize]
            }

            /// [`from_u8`](Self::from_u8) by `match`, to build its table.
            const fn decode(v: u8) -> Opcode {
                match v {
                    $( $code => Opcode::$variant, )*
                    other => Opcode::Unknown(other),
                }
            }

            /// The opcode byte.
            pub const fn to_u8(self) -> u8 {
                match self {
                    $( Opcode::$variant => $code, )*
                    Opcode::Unknown(v) => v,
                }
            }

            /// The wire layout, or `None` for an unknown opcode.
            pub const fn layout(self) -> Option<Layout> {
                match self {
                    $( Opcode::$variant => Some(Layout {
                        name: $name,
                        headers: Headers::EMPTY $( .with(Headers::$h) )*,
                        payload: $payload,
                    }), )*
                    Opcode::Unknown(_) => None,
                }
            }
        }
    };
}

opcodes! {
    RcSendFirst = 0x00, "RC_SEND_FIRST", [], true;
    RcSendMiddle = 0x01, "RC_SEND_MIDDLE", [], true;
    RcSendLast = 0x02, "RC_SEND_LAST", [], true;
    RcSendLastImm = 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", [IMMDT], true;
    RcSendOnly = 0x04, "RC_SEND_ONLY", [], true;
    RcSendOnlyImm = 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", [IMMDT], true;
    RcWriteFirst = 0x06, "RC_RDMA_WRITE_FIRST", [RETH], true;
    RcWriteMiddle = 0x07, "RC_RDMA_WRITE_MIDDLE", [], true;
    RcWriteLast = 0x08, "RC_RDMA_WRITE_LAST", [], true;
    RcWriteLastImm = 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", [IMMDT], true;
    RcWriteOnly = 0x0a, "RC_RDMA_WRITE_ONLY", [RETH], true;
    RcWriteOnlyImm = 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", [RETH, IMMDT], true;
    RcReadRequest = 0x0c, "RC_RDMA_READ_REQUEST", [RETH], false;
    RcReadResponseFirst = 0x0d, "RC_RDMA_READ_RESPONSE_FIRST", [AETH], true;
    RcReadResponseMiddle = 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", [], true;
    RcReadResponseLast = 0x0f, "RC_RDMA_READ_RESPONSE_LAST", [AETH], true;
    RcReadResponseOnly = 0x10, "RC_RDMA_READ_RESPONSE_ONLY", [AETH], true;
    RcAck = 0x11, "RC_ACKNOWLEDGE", [AETH], false;
    RcAtomicAck = 0x12, "RC_ATOMIC_ACKNOWLEDGE", [AETH, ATOMIC_ACK_ETH], false;
    RcCompareSwap = 0x13, "RC_COMPARE_SWAP", [ATOMIC_ETH], false;
    RcFetchAdd = 0x14, "RC_FETCH_ADD", [ATOMIC_ETH], false;
    RcSendLastInv = 0x16, "RC_SEND_LAST_WITH_INVALIDATE", [IETH], true;
    RcSendOnlyInv = 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", [IETH], true;
    UcSendFirst = 0x20, "UC_SEND_FIRST", [], true;
    UcSendMiddle = 0x21, "UC_SEND_MIDDLE", [], true;
    UcSendLast = 0x22, "UC_SEND_LAST", [], true;
    UcSendLastImm = 0x23, "UC_SEND_LAST_WITH_IMMEDIATE", [IMMDT], true;
    UcSendOnly = 0x24, "UC_SEND_ONLY", [], true;
    UcSendOnlyImm = 0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", [IMMDT], true;
    UcWriteFirst = 0x26, "UC_RDMA_WRITE_FIRST", [RETH], true;
    UcWriteMiddle = 0x27, "UC_RDMA_WRITE_MIDDLE", [], true;
    UcWriteLast = 0x28, "UC_RDMA_WRITE_LAST", [], true;
    UcWriteLastImm = 0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", [IMMDT], true;
    UcWriteOnly = 0x2a, "UC_RDMA_WRITE_ONLY", [RETH], true;
    UcWriteOnlyImm = 0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", [RETH, IMMDT], true;
    UdSendOnly = 0x64, "UD_SEND_ONLY", [DETH], true;
    UdSendOnlyImm = 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", [DETH, IMMDT], true;
    Cnp = 0x81, "CNP", [CNP_PAD], false;
}

impl Opcode {
    /// The IBA name, or `UNKNOWN` for codes without a layout.
    pub fn name(self) -> &'static str {
        self.layout().map_or("UNKNOWN", |l| l.name)
    }

    /// Transport service, from the opcode's top three bits.
    pub const fn transport(self) -> Transport {
        match self.to_u8() >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            _ => Transport::Other,
        }
    }

    /// SEND of any kind (RC, UC or UD; any position; with or without imm/inv).
    pub fn is_send(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendFirst
                | RcSendMiddle
                | RcSendLast
                | RcSendLastImm
                | RcSendOnly
                | RcSendOnlyImm
                | RcSendLastInv
                | RcSendOnlyInv
                | UcSendFirst
                | UcSendMiddle
                | UcSendLast
                | UcSendLastImm
                | UcSendOnly
                | UcSendOnlyImm
                | UdSendOnly
                | UdSendOnlyImm
        )
    }

    /// RDMA WRITE of any kind.
    pub fn is_write(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcWriteFirst
                | RcWriteMiddle
                | RcWriteLast
                | RcWriteLastImm
                | RcWriteOnly
                | RcWriteOnlyImm
                | UcWriteFirst
                | UcWriteMiddle
                | UcWriteLast
                | UcWriteLastImm
                | UcWriteOnly
                | UcWriteOnlyImm
        )
    }

    /// RDMA READ response of any position.
    pub fn is_read_response(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcReadResponseFirst | RcReadResponseMiddle | RcReadResponseLast | RcReadResponseOnly
        )
    }

    /// CMP_SWAP or FETCH_ADD request.
    pub fn is_atomic(self) -> bool {
        matches!(self, Opcode::RcCompareSwap | Opcode::RcFetchAdd)
    }

    /// A packet that starts a message (FIRST or ONLY, or a single-packet request).
    pub fn is_first(self) -> bool {
        let n = self.name();
        n.contains("FIRST")
            || n.contains("ONLY")
            || self.is_atomic()
            || self == Opcode::RcReadRequest
    }

    /// A packet that ends a message (LAST or ONLY, or a single-packet request).
    pub fn is_last(self) -> bool {
        let n = self.name();
        n.contains("LAST")
            || n.contains("ONLY")
            || self.is_atomic()
            || self == Opcode::RcReadRequest
    }

    /// A request the responder answers (as opposed to a response the requester consumes).
    pub fn is_request(self) -> bool {
        self.is_send() || self.is_write() || self.is_atomic() || self == Opcode::RcReadRequest
    }

    /// Carries immediate data.
    pub fn has_imm(self) -> bool {
        self.layout()
            .is_some_and(|l| l.headers.contains(Headers::IMMDT))
    }
}

impl Serialize for Opcode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.to_u8())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_decodes_as_the_match_says() {
        // The lookup table and the `match` it is built from agree on all
        // 256 bytes, and every byte survives a round trip.
        for v in 0..=255u8 {
            assert_eq!(Opcode::from_u8(v), Opcode::decode(v));
            assert_eq!(Opcode::from_u8(v).to_u8(), v);
        }
        assert_eq!(Opcode::from_u8(0x04), Opcode::RcSendOnly);
        assert_eq!(Opcode::from_u8(0xff), Opcode::Unknown(0xff));
    }

    #[test]
    fn table_round_trips_and_is_complete() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(op.to_u8()), op);
            assert!(op.layout().is_some());
        }
        assert_eq!(Opcode::from_u8(0x15), Opcode::Unknown(0x15));
        assert_eq!(Opcode::ALL.len(), 23 + 12 + 2 + 1);
    }

    #[test]
    fn layouts_match_iba_table() {
        let l = Opcode::RcWriteOnlyImm.layout().unwrap();
        assert_eq!(l.headers.len(), 20);
        assert_eq!(Opcode::RcAtomicAck.layout().unwrap().headers.len(), 12);
        assert_eq!(Opcode::RcCompareSwap.layout().unwrap().headers.len(), 28);
        assert_eq!(Opcode::UdSendOnlyImm.layout().unwrap().headers.len(), 12);
        assert_eq!(Opcode::Cnp.layout().unwrap().headers.len(), 16);
        assert_eq!(Opcode::UdSendOnly.transport(), Transport::Ud);
        assert!(Opcode::RcReadResponseMiddle.is_read_response());
        assert!(Opcode::RcSendOnly.is_first() && Opcode::RcSendOnly.is_last());
        assert!(!Opcode::RcWriteMiddle.is_first() && !Opcode::RcWriteMiddle.is_last());
    }
}
