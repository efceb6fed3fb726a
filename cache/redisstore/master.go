package redisstore

// SentinelMaster returns the address ("host:port") of the master the store's Sentinel
// (failover) client last connected to, as the store's dial hook saw it (go-redis dials the
// master the sentinels name), or "" for any other client, and
// before the first connection. A new address means the sentinels promoted a replica: the
// degraded mode of a paced ratemonitor.Transport treats that as an outage (see
// ratemonitor.DegradedConfig), since Redis replicates asynchronously and the old master may
// have granted slots the new one never saw.
func (st *Store) SentinelMaster() string {
	if st.route.dialed == nil {
		return ""
	}
	if a := st.route.dialed.addr.Load(); a != nil {
		return *a
	}
	return ""
}
