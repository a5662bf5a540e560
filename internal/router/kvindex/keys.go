package kvindex

// RequestKeys appends to dst the content keys of the full blocks of tokens (a trailing partial
// block has no key: engines only cache full blocks) and returns it. Lookup and Predict compute
// these themselves; call it when you need the keys, or to reuse them across calls.
func RequestKeys(dst []Key, tokens []uint32, blockSize int, p KeyParams) []Key {
	if blockSize <= 0 {
		return dst
	}
	h := newChain(p.LoRAName)
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		var extra uint64
		if i == 0 && p.CacheSalt != "" {
			extra = saltDigest(p.CacheSalt)
		}
		dst = append(dst, h.next(tokens[i:i+blockSize], extra))
	}
	return dst
}
