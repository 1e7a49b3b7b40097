"""Client quotas on a broker: measured rates (:mod:`.rate`), the quota of each connection and
its throttle time (:mod:`.manager`), and the hook around every request (:mod:`.throttle`)."""
