// amp_stream.h -- streams and AXI-stream beats, for g++ C simulation and for Vitis HLS.
//
// Three ways to build the same kernels:
//   __SYNTHESIS__ or AMP_USE_XILINX_HEADERS (Vitis HLS synthesis, Vitis C simulation and
//     co-simulation): Xilinx's own hls::stream (hls_stream.h) and ap_axiu<64,0,0,0>
//     (ap_axi_sdata.h).
//   AMP_USE_AP_TYPES: Xilinx's arbitrary-precision types (ap_int.h, the Apache-2.0 headers some
//     packages ship, e.g. hls4ml) for the beat's fields, as ap_axiu declares them, with the
//     stream below. This is how the tests hold the kernels to the genuine types without Vitis.
//   neither: plain C++, no Xilinx header at all.
// The stream below exposes only members Vitis HLS documents for hls::stream (UG1399: the
// constructors, empty, full, size, read, read_nb, write, write_nb, >> and <<), so code that
// compiles against it uses nothing Vitis lacks.
#pragma once
#include <cstdint>

#if defined(__SYNTHESIS__) || defined(AMP_USE_XILINX_HEADERS)
#include <ap_axi_sdata.h>
#include <hls_stream.h>

namespace amp {
typedef ap_axiu<64, 0, 0, 0> AxisBeat;
inline uint64_t beat_data(const AxisBeat& b) { return b.data.to_uint64(); }
}  // namespace amp

#else
#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>

#ifdef AMP_USE_AP_TYPES
#include <ap_int.h>
#endif

namespace hls {

// An unbounded FIFO, as hls::stream behaves in C simulation. Reading an empty stream would stall
// hardware forever, so here it is an error that names the stream.
template <typename T>
class stream {
   public:
    stream() : name_("stream") {}
    explicit stream(const char* name) : name_(name) {}
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    bool empty() const { return q_.empty(); }
    bool full() const { return false; }
    unsigned size() const { return (unsigned)q_.size(); }
    void write(const T& v) { q_.push_back(v); }
    bool write_nb(const T& v) {
        q_.push_back(v);
        return true;
    }
    T read() {
        if (q_.empty()) throw std::runtime_error(std::string("read from empty stream ") + name_);
        T v = q_.front();
        q_.pop_front();
        return v;
    }
    void read(T& v) { v = read(); }
    bool read_nb(T& v) {
        if (q_.empty()) return false;
        v = read();
        return true;
    }
    void operator>>(T& v) { read(v); }
    void operator<<(const T& v) { write(v); }

   private:
    const char* name_;
    std::deque<T> q_;
};

}  // namespace hls

namespace amp {
#ifdef AMP_USE_AP_TYPES
// The fields of ap_axiu<64, 0, 0, 0>, with its types.
struct AxisBeat {
    ap_uint<64> data;
    ap_uint<8> keep;
    ap_uint<8> strb;
    ap_uint<1> last;
};
inline uint64_t beat_data(const AxisBeat& b) { return b.data.to_uint64(); }
#else
// Field-compatible with ap_axiu<64, 0, 0, 0>: data, keep, strb, last.
struct AxisBeat {
    uint64_t data;
    uint8_t keep;
    uint8_t strb;
    bool last;
};
inline uint64_t beat_data(const AxisBeat& b) { return b.data; }
#endif
}  // namespace amp

#endif

namespace amp {
inline AxisBeat make_beat(uint64_t data, bool last) {
    AxisBeat b;
    b.data = data;
    b.keep = 0xFF;
    b.strb = 0xFF;
    b.last = last;
    return b;
}
inline bool beat_last(const AxisBeat& b) { return b.last != 0; }
typedef hls::stream<AxisBeat> Stream;

// Empties a stream (a reset): only read(), as hls::stream has no clear().
inline void drain_stream(Stream& s) {
    while (!s.empty()) s.read();
}
}  // namespace amp
