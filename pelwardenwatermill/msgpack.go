package pelwardenwatermill

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errMsgpack: the metadata field of a watermill-redisstream entry is not a
// msgpack map of strings.
var errMsgpack = errors.New("not a msgpack map of strings")

// decodeMsgpackStringMap decodes what watermill-redisstream's default
// marshaller writes for a message's metadata: msgpack.Marshal of a
// map[string]string (vmihailenco/msgpack v4). It reads a map (fixmap,
// map16, map32, or nil) whose keys and values are strings (fixstr, str8,
// str16, str32) or binary (bin8, bin16, bin32); a nil value is "". The
// whole input must be one map.
func decodeMsgpackStringMap(b []byte) (map[string]string, error) {
	d := msgpackDecoder{b: b}
	n, err := d.mapLen()
	if err != nil {
		return nil, err
	}
	if n > len(d.b) { // every entry takes at least two bytes
		return nil, fmt.Errorf("%w: map of %d entries in %d bytes", errMsgpack, n, len(b))
	}
	out := make(map[string]string, n)
	for range n {
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		v, err := d.str()
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the map", errMsgpack, len(d.b))
	}
	return out, nil
}

type msgpackDecoder struct{ b []byte }

func (d *msgpackDecoder) byte() (byte, error) {
	if len(d.b) == 0 {
		return 0, fmt.Errorf("%w: truncated", errMsgpack)
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, nil
}

// uint reads a big-endian unsigned integer of size bytes.
func (d *msgpackDecoder) uint(size int) (int, error) {
	if len(d.b) < size {
		return 0, fmt.Errorf("%w: truncated", errMsgpack)
	}
	var n uint64
	switch size {
	case 1:
		n = uint64(d.b[0])
	case 2:
		n = uint64(binary.BigEndian.Uint16(d.b))
	case 4:
		n = uint64(binary.BigEndian.Uint32(d.b))
	}
	d.b = d.b[size:]
	if n > uint64(len(d.b)) {
		return 0, fmt.Errorf("%w: length %d beyond the %d bytes left", errMsgpack, n, len(d.b))
	}
	return int(n), nil
}

func (d *msgpackDecoder) mapLen() (int, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), nil
	case c == 0xc0:
		return 0, nil
	case c == 0xde:
		return d.uint(2)
	case c == 0xdf:
		return d.uint(4)
	}
	return 0, fmt.Errorf("%w: type byte 0x%02x where a map starts", errMsgpack, c)
}

func (d *msgpackDecoder) str() (string, error) {
	c, err := d.byte()
	if err != nil {
		return "", err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
		if n > len(d.b) {
			return "", fmt.Errorf("%w: truncated", errMsgpack)
		}
	case c == 0xc0:
		return "", nil
	case c == 0xd9 || c == 0xc4:
		n, err = d.uint(1)
	case c == 0xda || c == 0xc5:
		n, err = d.uint(2)
	case c == 0xdb || c == 0xc6:
		n, err = d.uint(4)
	default:
		return "", fmt.Errorf("%w: type byte 0x%02x where a string is expected", errMsgpack, c)
	}
	if err != nil {
		return "", err
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s, nil
}
