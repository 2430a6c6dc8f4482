//! HPCC formats (to come).
