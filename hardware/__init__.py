"""Microphones, speakers, cameras and Bluetooth behind one interface each (real and simulated
backends): ``audio`` (sources and sinks, 16 kHz mono int16 inside), ``espeak`` (speech
synthesis).
"""
