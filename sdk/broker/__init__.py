"""sdk.broker: the broker, the services that run next to a :class:`localstore.MessageStore`.

Submodules (import them directly; this package imports none of them), the facade first:

* :mod:`~sdk.broker.service`: :class:`BrokerService`, every operation a transport calls;
  :mod:`~sdk.broker.embedded`: local mode, the broker inside the application's process;
  :mod:`~sdk.broker.administration`: topics, groups, lag and offset resets.
* Sends: :mod:`~sdk.broker.send_answers` (a put's answer), :mod:`~sdk.broker.idempotence` and
  :mod:`~sdk.broker.idempotence_rebuild` (a resent batch stored once),
  :mod:`~sdk.broker.schedule` (delayed messages), :mod:`~sdk.broker.transactions` and
  :mod:`~sdk.broker.transaction_records` (half messages and their check-back),
  :mod:`~sdk.broker.retries` (send-back, retries, dead letters).
* Reads: :mod:`~sdk.broker.long_poll` and :mod:`~sdk.broker.parked_pulls` (pulls held until a
  message arrives), :mod:`~sdk.broker.queries` (by key and by id).
* Consumer groups: :mod:`~sdk.broker.membership` (what a member asks of its group), with
  :mod:`~sdk.broker.groups` (members), :mod:`~sdk.broker.leases` (queue locks),
  :mod:`~sdk.broker.group_offsets` (committed and start offsets) and
  :mod:`~sdk.broker.group_report` (members, queues, lag).
* :mod:`~sdk.broker.rounds`: a background thread running a service's rounds on a clock.
"""
