"""What sandboxd signs and seals in Redis (supervisor/shared_crypto.c), for
tests and the redis bench, which play a Redis writer with and without the
instances' secret. Keys: HKDF-SHA256 of SANDBOXD_REDIS_SECRET (salt
"sandboxd-redis-v1", info "mac" and "seal"); a MAC is HMAC-SHA256 over the
domain, the Redis key and each part, each as a 4-byte big-endian length and
its bytes, in hex; a token is sealed with ChaCha20-Poly1305 (a 12-byte
nonce, the key as associated data), nonce || ciphertext || tag in hex.
"""
import hashlib
import hmac
import json
import os
import struct

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

# The record's fields in the order they are signed.
FIELDS = ["id", "owner", "type", "image", "token", "agent", "port", "state",
          "session", "meta", "container_id", "mount_dir", "storage_path",
          "timeout", "created_at", "updated_at", "ports", "host", "api"]


class Signer:
    def __init__(self, secret):
        secret = secret.encode() if isinstance(secret, str) else secret
        prk = hmac.new(b"sandboxd-redis-v1", secret, hashlib.sha256).digest()
        self.mac_key = hmac.new(prk, b"mac\x01", hashlib.sha256).digest()
        self.seal_key = hmac.new(prk, b"seal\x01", hashlib.sha256).digest()

    def mac(self, domain, key, *parts):
        h = hmac.new(self.mac_key, digestmod=hashlib.sha256)
        for p in (domain, key) + parts:
            b = p.encode() if isinstance(p, str) else p
            h.update(struct.pack(">I", len(b)) + b)
        return h.hexdigest()

    def seal(self, plain, key):
        nonce = os.urandom(12)
        return (nonce + ChaCha20Poly1305(self.seal_key).encrypt(
            nonce, plain.encode(), key.encode())).hex()

    def unseal(self, sealed, key):
        b = bytes.fromhex(sealed)
        return ChaCha20Poly1305(self.seal_key).decrypt(
            b[:12], b[12:], key.encode()).decode()

    def sign_record(self, key, rec):
        """rec (field -> str) with its "mac" for key."""
        parts = []
        for f in FIELDS:
            parts += [f, rec.get(f, "")]
        return dict(rec, mac=self.mac("record", key, *parts))

    def lease(self, key, pid, api, host, lo, hi, run, until):
        """An instance's lease (instance:<id>), signed, as JSON text."""
        mac = self.mac("lease", key, str(pid), api, host, str(lo), str(hi),
                       run, str(until))
        return json.dumps({"pid": pid, "api": api, "host": host, "lo": lo,
                           "hi": hi, "run": run, "until": until, "mac": mac},
                          separators=(",", ":"))
