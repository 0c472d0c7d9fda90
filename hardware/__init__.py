"""Microphones, speakers, cameras and Bluetooth behind one interface each (real and simulated
backends). Filled by the voice issue.
"""
