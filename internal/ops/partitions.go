package ops

import (
	"strconv"
	"strings"

	"github.com/pelwarden/pelwarden"
)

// Partition is a stream key that pelwarden.Partitions makes: partition
// Index of Count of the partitioned stream Name.
type Partition struct {
	Name         string
	Count, Index int
}

// ParsePartition reports whether key is a partition of a partitioned
// stream, and which: it is one when pelwarden.Partitions(name, n) returns
// key at index i for the name, n and i key spells ("{name/n/i/k}"). Any
// other key, such as a user's own "{orders/8/3/0}" that Partitions would
// not make, is not.
func ParsePartition(key string) (Partition, bool) {
	inner, ok := strings.CutPrefix(key, "{")
	if !ok {
		return Partition{}, false
	}
	if inner, ok = strings.CutSuffix(inner, "}"); !ok {
		return Partition{}, false
	}
	parts := strings.Split(inner, "/")
	if len(parts) < 4 {
		return Partition{}, false
	}
	name := strings.Join(parts[:len(parts)-3], "/")
	n, err1 := strconv.Atoi(parts[len(parts)-3])
	i, err2 := strconv.Atoi(parts[len(parts)-2])
	if err1 != nil || err2 != nil || i < 0 || i >= n {
		return Partition{}, false
	}
	keys, err := pelwarden.Partitions(name, n)
	if err != nil || keys[i] != key {
		return Partition{}, false
	}
	return Partition{Name: name, Count: n, Index: i}, true
}

// PartitionGlob is the SCAN MATCH pattern of every partition of the
// partitioned stream name, whatever their number: "{name/*" with name's
// glob characters escaped. Keys it matches are checked with ParsePartition.
func PartitionGlob(name string) string {
	var b strings.Builder
	b.WriteByte('{')
	for _, r := range name {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteString("/*")
	return b.String()
}
