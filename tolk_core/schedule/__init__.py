"""Scheduling: prepare_rangeify, placements, rangeify, kernel order, memory planning."""
