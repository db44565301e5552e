"""Scrubbing: what the store takes out of text before it stores it (``SessionStore(scrub=...)``).

:mod:`~soong_store.scrub.secrets` holds :class:`~soong_store.scrub.secrets.SecretScrubber`, the
scrubber of common credentials; :mod:`~soong_store.scrub.values` applies any scrubber to the
strings of the values and content blocks a store is given. Nothing here is imported unless a
store is given a scrubber or the name ``SecretScrubber`` is used.
"""
