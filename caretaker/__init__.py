"""The team certificate authority, peers, the signed roster, trust store and fingerprint art."""
