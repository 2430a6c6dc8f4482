//! Memory regions and the access checks every DMA passes through.
//!
//! IBA 10.6 (memory protection): a local access needs a valid L_Key whose
//! region belongs to the QP's PD and covers the range (and LOCAL_WRITE to
//! write); a remote access needs a valid R_Key, the same PD, the remote access
//! right for the operation, and the range inside the region. A check that
//! fails returns a reason, and the caller answers with the RDMA-correct
//! completion status or NAK *before* touching memory.

use crate::types::Access;

/// Handle of a protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

/// A registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    pub pd: PdHandle,
    pub addr: u64,
    pub length: u64,
    pub access: Access,
    pub lkey: u32,
    pub rkey: u32,
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessFault {
    /// No region has this key.
    BadKey,
    /// The region belongs to another PD.
    WrongPd,
    /// The region lacks the needed access right.
    NoPermission,
    /// The range leaves the region (or wraps the address space).
    OutOfBounds,
}

impl Mr {
    fn covers(&self, addr: u64, len: u64) -> bool {
        match (addr.checked_sub(self.addr), addr.checked_add(len)) {
            (Some(off), Some(_)) => off.checked_add(len).is_some_and(|e| e <= self.length),
            _ => false,
        }
    }

    /// Checks an access to `[addr, addr+len)` from a QP in `pd` needing `need`.
    pub fn check(
        &self,
        pd: PdHandle,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessFault> {
        if self.pd != pd {
            return Err(AccessFault::WrongPd);
        }
        if !self.access.contains(need) {
            return Err(AccessFault::NoPermission);
        }
        if !self.covers(addr, len) {
            return Err(AccessFault::OutOfBounds);
        }
        Ok(())
    }
}

/// The device's MR table, indexed by key.
#[derive(Debug, Default)]
pub struct MrTable {
    by_lkey: std::collections::BTreeMap<u32, Mr>,
    by_rkey: std::collections::BTreeMap<u32, u32>,
    next_index: u32,
    key_salt: u32,
}

impl MrTable {
    /// Heap bytes of the table's entries (see [`crate::footprint`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        crate::footprint::tree(&self.by_lkey) + crate::footprint::tree(&self.by_rkey)
    }

    /// Adds a region; lkey and rkey are derived from a table index and an
    /// 8-bit key (as rxe does), so stale keys from a deregistered region are
    /// unlikely to hit a new one.
    pub fn insert(&mut self, pd: PdHandle, addr: u64, length: u64, access: Access) -> Mr {
        self.next_index += 1;
        self.key_salt = self
            .key_salt
            .wrapping_mul(1_103_515_245)
            .wrapping_add(12_345);
        let key = (self.next_index << 8) | ((self.key_salt >> 16) & 0xff);
        let rkey = key ^ 0x0080_0000;
        let mr = Mr {
            pd,
            addr,
            length,
            access,
            lkey: key,
            rkey,
        };
        self.by_lkey.insert(key, mr);
        self.by_rkey.insert(rkey, key);
        mr
    }

    pub fn remove(&mut self, lkey: u32) -> Option<Mr> {
        let mr = self.by_lkey.remove(&lkey)?;
        self.by_rkey.remove(&mr.rkey);
        Some(mr)
    }

    pub fn by_lkey(&self, lkey: u32) -> Option<&Mr> {
        self.by_lkey.get(&lkey)
    }

    pub fn by_rkey(&self, rkey: u32) -> Option<&Mr> {
        self.by_rkey.get(&rkey).and_then(|k| self.by_lkey.get(k))
    }

    /// Count of regions in `pd`.
    pub fn count_in(&self, pd: PdHandle) -> usize {
        self.by_lkey.values().filter(|m| m.pd == pd).count()
    }

    /// Local check by L_Key.
    pub fn check_local(
        &self,
        pd: PdHandle,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessFault> {
        if len == 0 {
            return Ok(());
        }
        self.by_lkey(lkey)
            .ok_or(AccessFault::BadKey)?
            .check(pd, addr, len, need)
    }

    /// Remote check by R_Key. A zero-length remote access needs no valid key
    /// (IBA 9.4.1.1: R_Key is not checked when the DMA length is zero).
    pub fn check_remote(
        &self,
        pd: PdHandle,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessFault> {
        if len == 0 {
            return Ok(());
        }
        self.by_rkey(rkey)
            .ok_or(AccessFault::BadKey)?
            .check(pd, addr, len, need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        let mut t = MrTable::default();
        let pd = PdHandle(1);
        let mr = t.insert(
            pd,
            0x1000,
            0x100,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        );
        assert_ne!(mr.lkey, mr.rkey);
        assert_eq!(
            t.check_remote(pd, mr.rkey, 0x1000, 0x100, Access::REMOTE_WRITE),
            Ok(())
        );
        assert_eq!(
            t.check_remote(pd, mr.lkey, 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessFault::BadKey)
        );
        assert_eq!(
            t.check_remote(pd, mr.rkey, 0x1001, 0x100, Access::REMOTE_WRITE),
            Err(AccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(pd, mr.rkey, 0xfff, 1, Access::REMOTE_WRITE),
            Err(AccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(pd, mr.rkey, u64::MAX, 2, Access::REMOTE_WRITE),
            Err(AccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(pd, mr.rkey, 0x1000, 8, Access::REMOTE_READ),
            Err(AccessFault::NoPermission)
        );
        assert_eq!(
            t.check_remote(PdHandle(2), mr.rkey, 0x1000, 8, Access::REMOTE_WRITE),
            Err(AccessFault::WrongPd)
        );
        t.remove(mr.lkey);
        assert_eq!(
            t.check_local(pd, mr.lkey, 0x1000, 1, Access::NONE),
            Err(AccessFault::BadKey)
        );
    }
}
