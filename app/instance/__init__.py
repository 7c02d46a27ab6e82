"""This database's identity: the fingerprint of the secret that hashes user identifiers."""
