"""Whole-timeslot releases with Clip-User (004 §V): mean and variance of every grid."""
