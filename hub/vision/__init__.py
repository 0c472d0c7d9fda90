"""Vision on the hub: snapshots from the devices' cameras, faces the owner names, text read.

- :mod:`.faces`: face detection (OpenCV's Haar cascade) and a 128-d face descriptor (dlib's
  ResNet from ``face-recognition-models``, on a chip aligned with the 5-point predictor);
- :mod:`.people`: enrolment of a named person from several photos (leave-one-out check, a
  distance line) and recognition — the pure rules;
- :mod:`.ocr`: text in a snapshot, read locally with Tesseract (``chi_sim+eng``);
- :mod:`.store`: ``HOME/vision.db`` — photos (what was read and recognised on each) and
  people (their face samples and centroid). Face data is ``high`` and never leaves the hub;
- :mod:`.service`: the mesh part — asks a device for a snapshot, reassembles its pieces,
  checks the digest, stores the JPEG in the L5 archive (its own budget, ``high``), puts a
  ``photo`` entry on the timeline and answers "what was that sign?" / "who did I see?".
"""
