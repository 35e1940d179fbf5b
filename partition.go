package pelwarden

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxPartitions is the most partitions Partitions makes (finding partition
// i's name takes about n tries of CRC16; 1,024 keep that under a few
// milliseconds, and more partitions than a cluster has primaries times a
// few buy nothing).
const MaxPartitions = 1024

// Partitions returns the n stream names of the partitioned stream name,
// partition i at index i, placed so that partition i lands in slot range i
// of n: slots [i*16384/n, (i+1)*16384/n). With the default slot layout of a
// cluster (each of k primaries owning one contiguous range) and n a
// multiple of k, each primary holds n/k partitions. Each name is one hash
// tag, so its dead-letter stream (DeadLetterStreamFor) is in its slot.
//
// The names are stable forever: the same name and n always give the same
// names, in every version. Renaming a partition strands its entries, so
// changing n means draining the old partitions first. The scheme, for
// producers in other languages: partition i is "{" + tag + "}" with
// tag = name + "/" + n + "/" + i + "/" + k, where k is the smallest
// integer from 0 up whose tag's CRC16 (XMODEM, as Redis Cluster hashes
// keys) modulo 16384 falls in the partition's slot range; all numbers are
// decimal. For example Partitions("orders", 2) is
// ["{orders/2/0/0}", "{orders/2/1/0}"].
//
// name must be non-empty, at most MaxNameBytes - 32 bytes and free of '{'
// and '}' (a brace would change which part of the name is hashed); n is
// 1 to MaxPartitions. Other input returns an error matching
// ErrInvalidArgument.
func Partitions(name string, n int) ([]string, error) {
	const fn = "Partitions"
	switch {
	case name == "":
		return nil, argError(fn, "name", "required")
	case len(name) > MaxNameBytes-32:
		return nil, argError(fn, "name", "at most %d bytes, got %d", MaxNameBytes-32, len(name))
	case strings.ContainsAny(name, "{}"):
		return nil, argError(fn, "name", "must not contain '{' or '}' (it would change the hash tag), got %q", clip(name))
	case n < 1 || n > MaxPartitions:
		return nil, argError(fn, "n", "must be between 1 and %d, got %d", MaxPartitions, n)
	}
	out := make([]string, n)
	prefix := name + "/" + strconv.Itoa(n) + "/"
	for i := range n {
		lo, hi := i*SlotCount/n, (i+1)*SlotCount/n
		base := prefix + strconv.Itoa(i) + "/"
		for k := 0; ; k++ {
			tag := base + strconv.Itoa(k)
			if s := int(crc16(tag) % SlotCount); s >= lo && s < hi {
				out[i] = "{" + tag + "}"
				break
			}
		}
	}
	return out, nil
}

// PartitionFor returns the partition, 0 to n-1, of the entries of key: the
// 64-bit FNV-1a hash of key's bytes modulo n. It is stable and
// language-neutral, so every producer sends one key's entries to one
// partition (and one consumer sees them in order). It panics if n < 1.
func PartitionFor(key string, n int) int {
	if n < 1 {
		panic(fmt.Sprintf("pelwarden.PartitionFor: n must be positive, got %d", n))
	}
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return int(h % uint64(n))
}
