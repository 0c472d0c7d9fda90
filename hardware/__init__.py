r"""Microphones, speakers, cameras and Bluetooth behind one interface each (real and simulated
backends): ``pcm`` (the one audio type: 16 kHz mono int16 ``Samples`` in ``Frame``\ s),
``audio`` (sources and sinks, conversion), ``espeak`` (speech synthesis).
"""
