"""sdk.broker: broker-side services that run next to a :class:`localstore.MessageStore`.

Submodules (import them directly; this package imports none of them):

* :mod:`sdk.broker.schedule`: delayed messages (``SCHEDULE_TOPIC_XXXX``) and the service that
  re-puts them into their real topic once due.
"""
