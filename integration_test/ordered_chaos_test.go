package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
)

// orderRecord is one handler run of the ordered chaos test, as the
// consumer subprocess wrote it to the order log.
type orderRecord struct {
	Key, Seq   int
	ID         string
	Partition  string
	Consumer   string
	Deliveries int64
	Start, End int64 // wall clock, ns (one host: the subprocesses share it)
	OK         bool  // the handler returned nil
}

// orderedPoison reports whether (key, seq) is a poison entry of the
// ordered chaos test: its handler always fails.
func orderedPoison(key, seq int) bool { return (key*31+seq)%97 == 0 }

// orderedChaosHandler is the handler of the ordered consumer subprocesses:
// it works a random while (stopping when its context is cancelled, as a
// handler must when its partition's lease is lost), then records the run
// with its start and end times; poison entries always fail. The record is
// written even when the run failed or was cancelled, with a context of
// its own, so that a run overlapping the next owner's shows in the log.
type orderedChaosHandler struct {
	rdb  redis.UniversalClient
	log  string
	work time.Duration
}

func (h *orderedChaosHandler) Handle(ctx context.Context, m *driver.Message) error {
	key, seq, err := keySeq(&pelwarden.Entry{ID: m.ID, Fields: m.Fields})
	if err != nil {
		return driver.DeadLetter(err)
	}
	start := time.Now()
	var workErr error
	if h.work > 0 {
		t := time.NewTimer(time.Duration(seq%7+1) * h.work / 7)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			workErr = context.Cause(ctx)
		}
	}
	poison := orderedPoison(key, seq)
	rec := orderRecord{Key: key, Seq: seq, ID: m.ID, Partition: m.Stream, Consumer: m.Consumer, Deliveries: m.Deliveries,
		Start: start.UnixNano(), End: time.Now().UnixNano(), OK: workErr == nil && !poison}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := h.rdb.RPush(rctx, h.log, b).Err(); err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	switch {
	case workErr != nil:
		return workErr
	case poison:
		return errors.New("ordered chaos: poison entry, the handler always fails")
	}
	return nil
}

// Ordered mode under faults (issue 23 §5), on each server of the matrix:
// three consumer subprocesses in ordered mode over 8 partitions, with a
// 2 s PartitionLease (a quarter of it, 500 ms, is what a handler whose
// lease lapsed has to return: more than a loaded test machine stalls),
// behind a faulty proxy, while keyed entries with
// per-key sequence numbers are produced: consumers are SIGKILLed and
// replaced (one time in four stopped gracefully instead), so they come and
// go, and the proxy cuts, stalls and slows connections (leases are lost and
// retaken). About 1% of the entries are poison. Then the faults stop, the
// partitions drain, and the checker asserts, from the runs the handlers
// recorded (start and end on the host's clock):
//
//   - the faults happened: at least one SIGKILL, one graceful stop and one
//     round of toxics (what their schedules guarantee in the faults' 12 s
//     or more: chaosInjector.minimums);
//   - nothing is lost: every entry was handled successfully (and is no
//     longer pending) or sits in its partition's dead-letter stream, the
//     poison ones with reason max_deliveries;
//   - in order per key: no run of an entry starts before every earlier
//     entry of its key had a successful run that ended before it, or was
//     dead-lettered;
//   - every repeat (a run of an entry that already succeeded) is a
//     redelivery (delivery 2 or more): after a crash or a lost lease the
//     next owner runs again, in order, what was handled but not acked;
//   - no two consumers' runs of one partition overlap in time.
func TestOrderedChaos(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()
		sc := newOrderedChaos(t, ctx, s.rdb, "ochaos")
		proxy, err := newChaosProxy(ctx, s.srv)
		require.NoError(t, err)
		t.Cleanup(proxy.close)
		sc.base.Addr = proxy.Addr()
		sc.run(t, ctx, s.srv.Name, func(ctx context.Context, fleet *chaosFleet) (map[string]int64, []faultMinimum, []string) {
			in := &chaosInjector{srv: s.srv, admin: s.rdb, proxy: proxy, fleet: fleet, keys: sc.keys, consumers: orderedChaosConsumers, counts: map[string]int64{}}
			in.run(ctx, faultKill|faultNetwork)
			counts, errs := in.result()
			return counts, in.minimums(faultKill | faultNetwork), errs
		})
	})
}

// The ordered chaos scenario's shape: 8 partitions, 32 keys with 40
// sequence numbers each, 3 consumer processes at a time.
const (
	orderedChaosParts     = 8
	orderedChaosKeys      = 32
	orderedChaosPerKey    = 40
	orderedChaosConsumers = 3
)

// orderedChaos is one run of the ordered chaos scenario on a server or a
// cluster: its partitions (their groups created), the order log, and the
// consumer processes' configuration, to which the caller adds how they
// connect (Addr or ClusterAddrs).
type orderedChaos struct {
	rdb      redis.UniversalClient // the producer's and the checker's client, straight to the server
	names    []string
	keys     chaosKeys
	orderLog string
	base     chaosConsumerConfig
}

// newOrderedChaos makes a scenario under a tag of its own that begins
// with prefix.
func newOrderedChaos(t *testing.T, ctx context.Context, rdb redis.UniversalClient, prefix string) *orderedChaos {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tag := prefix + "." + hex.EncodeToString(b)
	names, err := pelwarden.Partitions(tag, orderedChaosParts)
	require.NoError(t, err)
	k := newChaosKeys(tag)
	for _, p := range names {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, p, k.Group, "0").Err())
	}
	sc := &orderedChaos{rdb: rdb, names: names, keys: k, orderLog: tag + ":log"}
	sc.base = chaosConsumerConfig{Keys: k, ClientName: tag, Concurrency: 16, MaxDeliveries: 8,
		ShutdownTimeout: 5 * time.Second, MaxWork: 3 * time.Millisecond,
		Ordered: true, Partitions: names, PartitionLease: 2 * time.Second, Backoff: []time.Duration{20 * time.Millisecond}, OrderLog: sc.orderLog}
	return sc
}

// run starts the consumer processes, produces the keyed entries while
// inject injects faults (until its context ends; it returns the faults'
// counts, the least count of each that their schedules guarantee, and its
// own failures), stops the faults two seconds after the last entry (so
// they last at least 12 s: 40 rounds 250 ms apart, and the 2 s), waits for
// the partitions to drain, and runs the checker.
func (sc *orderedChaos) run(t *testing.T, ctx context.Context, server string, inject func(context.Context, *chaosFleet) (map[string]int64, []faultMinimum, []string)) {
	t.Helper()
	const parts, keys, perKey = orderedChaosParts, orderedChaosKeys, orderedChaosPerKey
	names, orderLogKey := sc.names, sc.orderLog
	fleet, err := newChaosFleet(t.TempDir(), sc.base, orderedChaosConsumers)
	if fleet != nil {
		t.Cleanup(fleet.close)
	}
	require.NoError(t, err)

	// The producer writes straight to the server, in rounds: sequence
	// seq of every key, over about 10 s.
	// Entry ids repeat across partitions (each is a stream of its own):
	// entries are named by partition and id.
	produced := map[string][2]int{} // partition + " " + id -> key, seq
	prodDone := make(chan error, 1)
	go func() {
		for seq := range perKey {
			pipe := sc.rdb.Pipeline()
			cmds := make([]*redis.StringCmd, keys)
			for key := range keys {
				cmds[key] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: names[key%parts], Values: []string{"key", strconv.Itoa(key), "seq", strconv.Itoa(seq)}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				prodDone <- err
				return
			}
			for key, c := range cmds {
				produced[names[key%parts]+" "+c.Val()] = [2]int{key, seq}
			}
			if !ctxwait.Sleep(ctx, 250*time.Millisecond) {
				prodDone <- ctx.Err()
				return
			}
		}
		prodDone <- nil
	}()
	faultCtx, stopFaults := context.WithCancel(ctx)
	var faults map[string]int64
	var mins []faultMinimum
	var injectorErrs []string
	injected := make(chan struct{})
	go func() { defer close(injected); faults, mins, injectorErrs = inject(faultCtx, fleet) }()
	require.NoError(t, <-prodDone)
	ctxwait.Sleep(ctx, 2*time.Second)
	stopFaults()
	<-injected

	drained := func() bool {
		for _, p := range names {
			g, err := sc.rdb.XInfoGroups(ctx, p).Result()
			if err != nil || len(g) != 1 || g[0].Pending != 0 || g[0].Lag != 0 {
				return false
			}
		}
		return true
	}
	for !drained() {
		if !ctxwait.Sleep(ctx, 100*time.Millisecond) {
			require.FailNow(t, "not drained", "pending entries left after the faults stopped")
		}
	}
	stopFailures := fleet.stop(chaosStopTimeout)
	started, killed := fleet.counts()

	raw, err := sc.rdb.LRange(ctx, orderLogKey, 0, -1).Result()
	require.NoError(t, err)
	byKey := map[int][]orderRecord{}
	byPart := map[string][]orderRecord{}
	succeeded := map[string]bool{}
	for _, line := range raw {
		var r orderRecord
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		byKey[r.Key] = append(byKey[r.Key], r)
		byPart[r.Partition] = append(byPart[r.Partition], r)
		if r.OK {
			succeeded[r.Partition+" "+r.ID] = true
		}
	}
	dead := map[string]string{} // partition + " " + original id -> reason
	for _, p := range names {
		recs, err := sc.rdb.XRange(ctx, pelwarden.DeadLetterStreamFor(p), "-", "+").Result()
		require.NoError(t, err)
		for _, r := range recs {
			id, _ := r.Values[pelwarden.FieldOriginalID].(string)
			reason, _ := r.Values[pelwarden.FieldReason].(string)
			dead[p+" "+id] = reason
		}
	}
	var problems []string
	poison := 0
	for id, ks := range produced {
		reason, isDead := dead[id]
		switch {
		case orderedPoison(ks[0], ks[1]):
			poison++
			if reason != pelwarden.ReasonMaxDeliveries {
				problems = append(problems, fmt.Sprintf("poison %s (key %d seq %d) not dead-lettered for max_deliveries (dead-lettered: %v)", id, ks[0], ks[1], isDead))
			}
		case !succeeded[id] && !isDead:
			problems = append(problems, fmt.Sprintf("lost: %s (key %d seq %d) never succeeded and is not dead-lettered", id, ks[0], ks[1]))
		}
	}
	settledAt := func(key, seq int, before int64) bool {
		for _, r := range byKey[key] {
			if r.Seq == seq && r.OK && r.End <= before {
				return true
			}
		}
		return false
	}
	idOf := map[[2]int]string{}
	for id, ks := range produced {
		idOf[ks] = id
	}
	repeats := 0
	for key, recs := range byKey {
		sort.Slice(recs, func(i, j int) bool { return recs[i].Start < recs[j].Start })
		for _, r := range recs {
			for earlier := range r.Seq {
				if _, isDead := dead[idOf[[2]int{key, earlier}]]; !isDead && !settledAt(key, earlier, r.Start) {
					problems = append(problems, fmt.Sprintf("order: key %d seq %d (%s, delivery %d) ran before seq %d succeeded or was dead-lettered", key, r.Seq, r.Consumer, r.Deliveries, earlier))
					break
				}
			}
			if settledAt(key, r.Seq, r.Start) {
				repeats++
				if r.Deliveries < 2 {
					problems = append(problems, fmt.Sprintf("repeat: key %d seq %d ran again at delivery %d (%s)", key, r.Seq, r.Deliveries, r.Consumer))
				}
			}
		}
	}
	for p, recs := range byPart {
		sort.Slice(recs, func(i, j int) bool { return recs[i].Start < recs[j].Start })
		for i := 1; i < len(recs); i++ {
			prev, cur := recs[i-1], recs[i]
			if cur.Consumer != prev.Consumer && cur.Start < prev.End {
				problems = append(problems, fmt.Sprintf("overlap on %s: %s ran %s (seq %d) until %d while %s started %s at %d", p, prev.Consumer, prev.ID, prev.Seq, prev.End, cur.Consumer, cur.ID, cur.Start))
			}
		}
	}
	t.Logf("%s: %d entries (%d poison) over %d partitions, %d runs recorded, %d repeats; %d consumer processes, %d SIGKILLs; faults %v (minimums %v)",
		server, len(produced), poison, parts, len(raw), repeats, started, killed, faults, minimumsMap(mins))
	if short := faultShortfalls(faults, mins); len(short) > 0 {
		// Reported, and the order checked too.
		t.Errorf("%s: injected fewer faults than their schedules guarantee:\n  %s", server, strings.Join(short, "\n  "))
	}
	problems = append(problems, injectorErrs...)
	problems = append(problems, fleet.failures()...)
	problems = append(problems, stopFailures...)
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
	}
	require.Empty(t, problems)
	require.Equal(t, keys*perKey, len(produced))
}
