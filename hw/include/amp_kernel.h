// amp_kernel.h -- what every generated kernel shares: message I/O in the wire format, tags,
// tag-keyed caches and join tables, and error reporting. Integer arithmetic only.
//
// Constants (field positions, element sizes, precisions, tables) come from the generated
// amp_wire.h and amp_numerics.h; nothing here restates a number that Python defines.
#pragma once
#include <cstdint>

#include "amp_numerics.h"
#include "amp_stream.h"
#include "amp_wire.h"

#ifndef __SYNTHESIS__
#include <stdexcept>
#include <string>
#define AMP_FAIL(msg) throw std::runtime_error(std::string(AMP_KERNEL_NAME) + ": " + (msg))
#else
#define AMP_FAIL(msg) amp::sticky_error = true
#endif

namespace amp {
// Internal linkage: every kernel is its own translation unit with its own AMP_KERNEL_NAME, so
// each gets its own copy of these helpers. Shared (inline, external) copies would be one
// definition for the linker to pick, and every error would name whichever kernel it picked.
namespace {

#ifdef __SYNTHESIS__
static bool sticky_error = false;
#endif

struct Tag {
    uint32_t key;
    uint8_t len;
    uint16_t s[wire::STATE_WORDS];
};

inline bool same_tag(const Tag& a, const Tag& b) {
    if (a.key != b.key || a.len != b.len) return false;
    for (int i = 0; i < wire::STATE_WORDS; ++i)
        if (i < a.len && a.s[i] != b.s[i]) return false;
    return true;
}

struct Header {
    uint32_t channel;
    uint32_t direction;
    uint32_t kind;
    uint32_t rows;
    Tag tag;
};

inline uint64_t get_field(uint64_t beat, int64_t lsb, int64_t bits) { return wire::field_get(beat, lsb, bits); }

// Reads the header and state beats of the next message.
inline Header read_header(Stream& s) {
    const uint64_t h = beat_data(s.read());
    const uint64_t st = beat_data(s.read());
    Header out;
    out.channel = get_field(h, wire::HDR_CHANNEL_LSB, wire::HDR_CHANNEL_BITS);
    out.direction = get_field(h, wire::HDR_DIRECTION_LSB, wire::HDR_DIRECTION_BITS);
    out.kind = get_field(h, wire::HDR_KIND_LSB, wire::HDR_KIND_BITS);
    out.rows = get_field(h, wire::HDR_ROWS_LSB, wire::HDR_ROWS_BITS);
    out.tag.key = get_field(h, wire::HDR_KEY_LSB, wire::HDR_KEY_BITS);
    out.tag.len = get_field(h, wire::HDR_STATE_LEN_LSB, wire::HDR_STATE_LEN_BITS);
    for (int i = 0; i < wire::STATE_WORDS; ++i)
        out.tag.s[i] = i < out.tag.len ? get_field(st, i * wire::STATE_WORD_BITS, wire::STATE_WORD_BITS) : 0;
    return out;
}

// Writes the header and state beats; TLAST on the state beat only when no payload follows.
inline void write_header(Stream& s, uint32_t direction, uint32_t kind, const Tag& tag, uint32_t rows,
                         bool has_payload = true) {
    uint64_t h = wire::field_put(0, wire::HDR_CHANNEL_LSB, wire::HDR_CHANNEL_BITS) |
                 wire::field_put(direction, wire::HDR_DIRECTION_LSB, wire::HDR_DIRECTION_BITS) |
                 wire::field_put(kind, wire::HDR_KIND_LSB, wire::HDR_KIND_BITS) |
                 wire::field_put(tag.len, wire::HDR_STATE_LEN_LSB, wire::HDR_STATE_LEN_BITS) |
                 wire::field_put(rows, wire::HDR_ROWS_LSB, wire::HDR_ROWS_BITS) |
                 wire::field_put(tag.key, wire::HDR_KEY_LSB, wire::HDR_KEY_BITS);
    uint64_t st = 0;
    for (int i = 0; i < wire::STATE_WORDS; ++i)
        if (i < tag.len) st |= wire::field_put(tag.s[i], i * wire::STATE_WORD_BITS, wire::STATE_WORD_BITS);
    s.write(make_beat(h, false));
    s.write(make_beat(st, !has_payload));
}

constexpr int EPB16 = wire::ELEMENTS_PER_BEAT_DATA;  // 16-bit elements per beat

// Payload rows of 16-bit elements (DATA, WEIGHTS), each row padded to whole beats; a beat a cycle
// under Vitis HLS (PIPELINE II=1, the lanes unrolled; g++ ignores the pragmas). Rows beyond
// MAX_ROWS (a malformed message: an error) are read off the stream but stored nowhere.
template <int MAX_ROWS, int W>
inline void read_rows(Stream& s, uint32_t rows, int16_t buf[MAX_ROWS][W]) {
    if (rows < 1 || rows > MAX_ROWS) AMP_FAIL("message rows outside [1, max_rows]");
    for (uint32_t r = 0; r < rows; ++r)
        for (int b = 0; b < (W + EPB16 - 1) / EPB16; ++b) {
#pragma HLS PIPELINE II=1
            const uint64_t d = beat_data(s.read());
            for (int e = 0; e < EPB16; ++e) {
#pragma HLS UNROLL
                if (b * EPB16 + e < W && r < (uint32_t)MAX_ROWS) buf[r][b * EPB16 + e] = (int16_t)(uint16_t)(d >> (16 * e));
            }
        }
}

// Payload rows added into an exact running sum, element by element (``first``: the sum starts
// at them): a join whose result is the sum of its parts, in whatever order they arrive, keeps one
// buffer instead of one per port (broadcast's gradients). Rows checked as read_rows does.
template <int MAX_ROWS, int W>
inline void add_rows(Stream& s, uint32_t rows, int32_t sum[MAX_ROWS][W], bool first) {
    if (rows < 1 || rows > MAX_ROWS) AMP_FAIL("message rows outside [1, max_rows]");
    for (uint32_t r = 0; r < rows; ++r)
        for (int b = 0; b < (W + EPB16 - 1) / EPB16; ++b) {
#pragma HLS PIPELINE II=1
            const uint64_t d = beat_data(s.read());
            for (int e = 0; e < EPB16; ++e) {
#pragma HLS UNROLL
                const int c = b * EPB16 + e;
                if (c < W && r < (uint32_t)MAX_ROWS)
                    sum[r][c] = (first ? 0 : sum[r][c]) + (int16_t)(uint16_t)(d >> (16 * e));
            }
        }
}

// Payload rows read and kept nowhere (a part whose values do not matter: an index edge's gradient).
template <int MAX_ROWS, int W>
inline void skip_rows(Stream& s, uint32_t rows) {
    if (rows < 1 || rows > MAX_ROWS) AMP_FAIL("message rows outside [1, max_rows]");
    const uint32_t beats = rows * ((W + EPB16 - 1) / EPB16);
    for (uint32_t b = 0; b < beats; ++b) {
#pragma HLS PIPELINE II=1
        s.read();
    }
}

// At most MAX_ROWS rows: after an error a row count may be out of range, never the index.
template <int MAX_ROWS, int W>
inline void write_rows(Stream& s, uint32_t rows, const int16_t buf[MAX_ROWS][W]) {
    if (rows > (uint32_t)MAX_ROWS) rows = MAX_ROWS;
    const int beats = (W + EPB16 - 1) / EPB16;
    for (uint32_t r = 0; r < rows; ++r)
        for (int b = 0; b < beats; ++b) {
#pragma HLS PIPELINE II=1
            uint64_t d = 0;
            for (int e = 0; e < EPB16; ++e) {
#pragma HLS UNROLL
                if (b * EPB16 + e < W) d |= (uint64_t)(uint16_t)buf[r][b * EPB16 + e] << (16 * e);
            }
            s.write(make_beat(d, r + 1 == rows && b + 1 == beats));
        }
}

// GRADS rows: one 64-bit lane per element, holding a 48-bit accumulator.
template <int ROWS, int W>
inline void write_rows64(Stream& s, const int64_t buf[ROWS][W]) {
    for (int r = 0; r < ROWS; ++r)
        for (int c = 0; c < W; ++c) {
#pragma HLS PIPELINE II=1
            s.write(make_beat((uint64_t)buf[r][c], r + 1 == ROWS && c + 1 == W));
        }
}

// Passes a message on unchanged but for its tag (routing nodes): the same direction and kind,
// and the payload beats copied as they are (TLAST travels with them).
template <int MAX_ROWS, int W>
inline void pass_message(Stream& from, Stream& to, const Header& h, const Tag& tag) {
    if (h.rows < 1 || h.rows > MAX_ROWS) AMP_FAIL("message rows outside [1, max_rows]");
    write_header(to, h.direction, h.kind, tag, h.rows);
    const uint32_t beats = h.rows * ((W + EPB16 - 1) / EPB16);
    for (uint32_t b = 0; b < beats; ++b) {
        // a beat a cycle: what the routing kernels' throughput rests on
#pragma HLS PIPELINE II=1
        to.write(from.read());
    }
}

// Skips the rest of a message (after an error), so the stream stays in step.
inline void drain_message(Stream& s) {
    while (!beat_last(s.read())) {
    }
}

// A tag-keyed table of SLOTS entries: forward values waiting for their backward, or partial
// joins. Linear search: SLOTS is small (bounded by mak times the messages one instance can
// leave at a node), and hardware unrolls the compare.
template <int SLOTS>
struct TagTable {
    bool valid[SLOTS];
    Tag tag[SLOTS];

    void clear() {
        for (int i = 0; i < SLOTS; ++i) valid[i] = false;
    }
    int find(const Tag& t) const {
        for (int i = 0; i < SLOTS; ++i)
            if (valid[i] && same_tag(tag[i], t)) return i;
        return -1;
    }
    bool full() const {
        for (int i = 0; i < SLOTS; ++i)
            if (!valid[i]) return false;
        return true;
    }
    int used() const {
        int n = 0;
        for (int i = 0; i < SLOTS; ++i) n += valid[i];
        return n;
    }
    int alloc(const Tag& t) {
        if (find(t) >= 0) AMP_FAIL("tag already in flight at this node");
        for (int i = 0; i < SLOTS; ++i)
            if (!valid[i]) {
                valid[i] = true;
                tag[i] = t;
                return i;
            }
        AMP_FAIL("tag table full");
        return 0;
    }
    // The slot of t, freed. An unknown tag is an error; the slot returned then is 0 (never a
    // negative index), whose contents the failed message must not be trusted with.
    int take(const Tag& t) {
        const int i = find(t);
        if (i < 0) {
            AMP_FAIL("no forward entry for this tag");
            return 0;
        }
        valid[i] = false;
        return i;
    }
    // The slot of t, allocating one for a new tag; -1 when t is new and the table is full.
    int find_or_alloc(const Tag& t) {
        const int i = find(t);
        if (i >= 0 || full()) return i;
        return alloc(t);
    }
    void release(int slot) { valid[slot] = false; }
};

// The header of a message whose payload still waits in its stream. A join reads the header
// first to learn the tag and takes the payload only once it has room for that tag, so a full
// table holds back new tags (back-pressure) without blocking the messages that complete a join.
struct HeldHeader {
    bool valid;
    Header h;

    void clear() { valid = false; }
    // Holds the next message's header unless one is held already; false when there is none.
    bool hold(Stream& s) {
        if (!valid && !s.empty()) {
            h = read_header(s);
            valid = true;
        }
        return valid;
    }
};

// Row tags of Ungroup / Group: row i of n has (i, n) pushed on its parent's state.
inline Tag row_tag(const Tag& parent, uint32_t i, uint32_t n) {
    if (parent.len + 2 > wire::STATE_WORDS) {
        AMP_FAIL("no room on the state for a row index (i, n)");
        return parent;
    }
    Tag t = parent;
    t.s[t.len++] = i;
    t.s[t.len++] = n;
    return t;
}

// The parent tag of a row tag, and its row index i of n; fails unless the state ends in (i, n)
// with 0 <= i < n.
inline Tag parent_tag(const Tag& t, uint32_t& i, uint32_t& n) {
    if (t.len < 2 || t.len > wire::STATE_WORDS) {
        AMP_FAIL("tag does not end in a row index (i, n)");
        i = 0;
        n = 1;
        return t;
    }
    i = t.s[t.len - 2];
    n = t.s[t.len - 1];
    if (i >= n) {
        AMP_FAIL("row index i outside [0, n)");
        i = 0;
    }
    Tag p = t;
    p.len -= 2;
    p.s[p.len] = 0;
    p.s[p.len + 1] = 0;
    return p;
}

}  // namespace
}  // namespace amp
