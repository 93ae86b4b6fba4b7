"""The suite's password hasher: Django's PBKDF2 at one iteration (Django's advice for tests: a slow hash only
slows the suite). Its hashes keep the `pbkdf2_sha256` name with their iteration count inside, so any process of the
product, a real worker or server started by a test included, verifies them with its own production hasher."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2(PBKDF2PasswordHasher):
    iterations = 1
