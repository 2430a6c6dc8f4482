//! Plots (to come).
