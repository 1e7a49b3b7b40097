"""Transactions (KIP-98, KIP-447, KIP-890 part 1): the transaction coordinator on
``__transaction_state`` and the contracts between it, the partitions and the group coordinator
(:mod:`broker.transaction.interfaces`)."""
