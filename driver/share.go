package driver

import "slices"

// shareOf is how many of n partitions the consumer self may own while
// members (distinct names, in byte order) are live: n/len(members), plus
// one for the first n%len(members) of them. The shares add up to n, so
// once every consumer sees the same members and holds no more than its
// share, every partition is held and held counts differ by at most one.
// A self missing from members (its heartbeat not seen yet) counts as one
// more member, placed in order.
func shareOf(members []string, self string, n int) int {
	rank, found := slices.BinarySearch(members, self)
	live := len(members)
	if !found {
		live++
	}
	share := n / live
	if rank < n%live {
		share++
	}
	return share
}

// rankOf is self's place among members (in byte order), where its search
// for partitions to acquire starts, so that consumers joining together
// try different partitions first.
func rankOf(members []string, self string) int {
	rank, _ := slices.BinarySearch(members, self)
	return rank
}
