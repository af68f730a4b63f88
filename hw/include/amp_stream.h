// amp_stream.h -- streams and AXI-stream beats, for g++ C simulation and for Vitis HLS.
//
// Under Vitis HLS (__SYNTHESIS__, or AMP_USE_XILINX_HEADERS for Vitis C simulation) this maps to
// Xilinx's own hls::stream and ap_axiu<64,0,0,0>. Under plain g++ it provides a minimal,
// dependency-free equivalent with the same member names, so the generated kernels compile
// unchanged with no Xilinx headers installed.
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

namespace hls {

// An unbounded FIFO. Reading an empty stream would stall hardware forever, so in C simulation
// it is an error that names the stream.
template <typename T>
class stream {
   public:
    stream() : name_("stream") {}
    explicit stream(const char* name) : name_(name) {}
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    bool empty() const { return q_.empty(); }
    bool full() const { return false; }
    std::size_t size() const { return q_.size(); }
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
    bool read_nb(T& v) {
        if (q_.empty()) return false;
        v = read();
        return true;
    }
    void clear() { q_.clear(); }
    const char* name() const { return name_; }

   private:
    const char* name_;
    std::deque<T> q_;
};

}  // namespace hls

namespace amp {
// Field-compatible with ap_axiu<64, 0, 0, 0>: data, keep, strb, last.
struct AxisBeat {
    uint64_t data;
    uint8_t keep;
    uint8_t strb;
    bool last;
};
inline uint64_t beat_data(const AxisBeat& b) { return b.data; }
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
typedef hls::stream<AxisBeat> Stream;
}  // namespace amp
