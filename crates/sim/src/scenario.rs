//! Scenario (to come).
