// amp_rtlsim.cpp -- the Verilator model of a generated design's top (prefix Vamp_top) behind a C
// API the Python host loads with ctypes (amp_hls/host/rtlsim.py). Fixed, not generated: it knows
// only the top's ports, which every design shares (ap_clk, ap_rst_n, host_in_T*, host_out_T*,
// amp_error).
//
// The host pushes beats into a host_in queue and asks for up to N clock cycles at a time; the loop
// below drives host_in (TVALID/TDATA/TLAST, TKEEP all ones), holds host_out_TREADY, collects
// host_out beats and stops early once the design is idle. Idle is exact, not a guess: host_in
// has nothing left to offer, host_out offers nothing, and one more clock leaves every register and
// memory of the model unchanged (the model's state is a plain C++ object, compared byte for byte;
// the build flattens the design so all of it sits in that object), so with these inputs the
// design can never move again. The check runs after quiet stretches that double in length, so a
// long computation costs few comparisons.
//
// For a simulated board (amp_hls/host/pynq_sim.py) the harness can also act as the AXI DMA's
// ends: host_out is ready only while an S2MM transfer is armed (amp_arm_out: up to N beats, and
// no further than the first TLAST, where a DMA transfer ends), amp_error only reported once per
// rising edge or not at all (the board's host learns of errors from the control channel), and
// a run may stop as soon as nothing can move (amp_set_stop_when_blocked): the inputs held and one
// clock that changes nothing, even with host_in beats waiting or a host_out beat not taken.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Vamp_top.h"
#include "Vamp_top___024root.h"
#include "verilated.h"

namespace {

constexpr int RESET_CYCLES = 8;
constexpr long FIRST_CHECK = 4;    // quiet cycles before the first idle check
constexpr long MAX_CHECK = 1024;  // the longest quiet stretch between checks
constexpr uint8_t FULL_KEEP = 0xFF;
// draws of AMP_BACKPRESSURE_BITS random bits (set by amp_hls.host.rtlsim) against thresholds
constexpr uint32_t FULL = 1u << AMP_BACKPRESSURE_BITS;  // the threshold that always passes

struct Beat {
    uint64_t data;
    bool last;
};

struct Sim {
    std::unique_ptr<VerilatedContext> context;
    std::unique_ptr<Vamp_top> top;
    std::deque<Beat> in;
    std::deque<Beat> out;
    std::vector<unsigned char> snapshot;
    unsigned long long cycles = 0;
    unsigned long long since_beat = 0;  // cycles since a beat last crossed host_in or host_out
    // Back-pressure: a host_in beat is offered, and host_out is ready, on a cycle when a draw of
    // AMP_BACKPRESSURE_BITS random bits falls below the threshold (FULL = always, 0 = never).
    uint32_t in_valid = FULL, out_ready = FULL;
    bool offered = false;  // host_in offered its beat last cycle and it was not taken
    long out_allowed = -1;  // host_out beats the armed S2MM transfer still takes (-1: no limit)
    bool error_fatal = true;  // amp_error stops a run (-2), once per rising edge
    bool error_reported = false;
    bool stop_when_blocked = false;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    std::string error;

    Sim() : context(new VerilatedContext), top(new Vamp_top(context.get(), "amp_top")) {
        snapshot.resize(sizeof(*top->rootp));
    }

    uint32_t draw() {  // xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return static_cast<uint32_t>(rng >> (64 - AMP_BACKPRESSURE_BITS));
    }

    void clock() {
        top->ap_clk = 0;
        top->eval();
        top->ap_clk = 1;
        top->eval();
        context->timeInc(1);
        ++cycles;
    }

    void reset() {
        in.clear();
        out.clear();
        error.clear();
        offered = false;
        since_beat = 0;
        error_reported = false;
        top->host_in_TVALID = 0;
        top->host_in_TDATA = 0;
        top->host_in_TLAST = 0;
        top->host_in_TKEEP = FULL_KEEP;
        top->host_out_TREADY = 0;
        top->ap_rst_n = 0;
        for (int i = 0; i < RESET_CYCLES; ++i) clock();
        top->ap_rst_n = 1;
    }

    bool state_unchanged_since_snapshot() const {
        return std::memcmp(snapshot.data(), top->rootp, snapshot.size()) == 0;
    }

    void take_snapshot() { std::memcpy(snapshot.data(), top->rootp, snapshot.size()); }

    // Runs up to max_cycles clocks: the cycles run once idle, -1 if still busy, -2 on an error.
    long run(long max_cycles) {
        long quiet = 0, next_check = FIRST_CHECK;
        bool armed = false;  // a snapshot was taken at the end of the previous (quiet) cycle
        for (long c = 0; c < max_cycles; ++c) {
            // AXI-stream: a beat once offered stays offered until taken.
            const bool offer = !in.empty() && (offered || in_valid >= FULL || draw() < in_valid);
            top->host_in_TVALID = offer;
            if (offer) {
                top->host_in_TDATA = in.front().data;
                top->host_in_TLAST = in.front().last;
            }
            // While quiet, TREADY holds steady (it matters only when host_out offers a beat), so
            // the inputs of two quiet cycles are equal and their states can be compared.
            const bool ready = out_allowed != 0 && out_ready > 0 && (quiet > 0 || out_ready >= FULL || draw() < out_ready);
            top->host_out_TREADY = ready;
            top->ap_clk = 0;
            top->eval();
            const bool took = offer && top->host_in_TREADY;
            const bool gave = ready && top->host_out_TVALID;
            const Beat beat{top->host_out_TDATA, top->host_out_TLAST != 0};
            const uint8_t keep = top->host_out_TKEEP;
            top->ap_clk = 1;
            top->eval();
            context->timeInc(1);
            ++cycles;
            offered = offer && !took;
            since_beat = took || gave ? 0 : since_beat + 1;
            if (took) in.pop_front();
            if (gave) {
                if (out_allowed > 0) out_allowed = beat.last ? 0 : out_allowed - 1;
                if (keep != FULL_KEEP) {
                    char text[96];
                    std::snprintf(text, sizeof text, "host_out gave a beat with TKEEP=0x%02x: wire beats are whole", keep);
                    error = text;
                    return -2;
                }
                out.push_back(beat);
            }
            if (!top->amp_error) {
                error_reported = false;
            } else if (error_fatal && !error_reported) {
                error_reported = true;
                error = "the design raised amp_error: a kernel or the boundary saw a message it cannot take";
                return -2;
            }
            // blocked: nothing moved, host_in's beat (if any) held offered, host_out not taking
            const bool held = in.empty() || offered;
            const bool blocked = stop_when_blocked && !took && !gave && held && (!top->host_out_TVALID || !ready);
            if (!blocked && (took || gave || !in.empty() || top->host_out_TVALID)) {
                quiet = 0;
                next_check = FIRST_CHECK;
                armed = false;
                continue;
            }
            ++quiet;
            if (armed) {
                if (state_unchanged_since_snapshot()) return c + 1;
                armed = false;
                next_check = next_check * 2 > MAX_CHECK ? MAX_CHECK : next_check * 2;
                quiet = 1;
            }
            if (quiet >= next_check) {
                take_snapshot();
                armed = true;
            }
        }
        return -1;
    }
};

}  // namespace

extern "C" {

void* amp_new() {
    Sim* sim = new Sim;
    sim->reset();
    return sim;
}

void amp_free(void* h) { delete static_cast<Sim*>(h); }

// Power-on state: empty queues, the design held in reset for a few cycles.
void amp_reset(void* h) { static_cast<Sim*>(h)->reset(); }

// Appends beats to the host_in queue.
int amp_push(void* h, const uint64_t* data, const uint8_t* last, int n) {
    Sim* sim = static_cast<Sim*>(h);
    for (int i = 0; i < n; ++i) sim->in.push_back(Beat{data[i], last[i] != 0});
    return n;
}

// Clocks until idle: the cycles run, -1 when max_cycles were not enough, -2 on an error.
long amp_run(void* h, long max_cycles) { return static_cast<Sim*>(h)->run(max_cycles); }

// Takes up to cap beats from host_out.
int amp_pop(void* h, uint64_t* data, uint8_t* last, int cap) {
    Sim* sim = static_cast<Sim*>(h);
    int n = 0;
    for (; n < cap && !sim->out.empty(); ++n) {
        data[n] = sim->out.front().data;
        last[n] = sim->out.front().last ? 1 : 0;
        sim->out.pop_front();
    }
    return n;
}

int amp_pending_in(void* h) { return static_cast<int>(static_cast<Sim*>(h)->in.size()); }

int amp_pending_out(void* h) { return static_cast<int>(static_cast<Sim*>(h)->out.size()); }

unsigned long long amp_cycles(void* h) { return static_cast<Sim*>(h)->cycles; }

unsigned long long amp_since_beat(void* h) { return static_cast<Sim*>(h)->since_beat; }

const char* amp_error(void* h) { return static_cast<Sim*>(h)->error.c_str(); }

// host_out for a simulated S2MM transfer: ready for up to beats beats and no further than the
// first TLAST (-1: always ready, the default; 0: never).
void amp_arm_out(void* h, long beats) { static_cast<Sim*>(h)->out_allowed = beats; }

long amp_out_allowed(void* h) { return static_cast<Sim*>(h)->out_allowed; }

// fatal 1 (the default): amp_run returns -2 when amp_error rises; 0: it never does.
void amp_set_error_fatal(void* h, int fatal) { static_cast<Sim*>(h)->error_fatal = fatal != 0; }

int amp_error_flag(void* h) { return static_cast<Sim*>(h)->top->amp_error ? 1 : 0; }

// 1: a run also ends when nothing can move (see the top of this file).
void amp_set_stop_when_blocked(void* h, int on) { static_cast<Sim*>(h)->stop_when_blocked = on != 0; }

// Back-pressure as thresholds out of FULL (FULL: every cycle, 0: never), and the draws' seed.
void amp_set_backpressure(void* h, unsigned in_valid, unsigned out_ready, unsigned long long seed) {
    Sim* sim = static_cast<Sim*>(h);
    sim->in_valid = in_valid;
    sim->out_ready = out_ready;
    sim->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

#ifdef AMP_PROFILE
// The profiling build (amp_hls/host/profile.py: the top is amp_profile, amp_top with counters on
// every stream): copies up to cap 32-bit words of its amp_counts port, lowest first, and returns
// how many the port holds.
int amp_profile_words(void* h, uint32_t* out, int cap) {
    const auto& port = static_cast<Sim*>(h)->top->amp_counts;
    const int words = static_cast<int>(sizeof(port) / sizeof(port[0]));
    for (int i = 0; i < words && i < cap; ++i) out[i] = port[i];
    return words;
}
#endif

}  // extern "C"
