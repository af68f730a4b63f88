// amp_widen and amp_narrow: the converters between a 64-bit stream and one of L 64-bit beats side
// by side, where a stream's writer and reader in amp_top have different lanes (amp_hls/wire.py,
// Lanes: to_lanes and from_lanes are their reference). Hand-written and shared by every design.
//
// A message on the wide stream is its header and its state beat, each alone in the low 64 bits
// of a wide beat, then each row's BPR narrow beats L at a time, the row's last wide beat padded
// with zero beats. Neither converter reads the header: a message's first two beats are its header
// and state, and its TLAST ends it; rows are every BPR narrow beats. Both move one narrow beat a
// cycle, so neither is slower than its narrow side.

// 64 -> 64 L: narrow beats written in place into the output register, lane by lane (the lanes
// above them cleared as a wide beat starts), which is offered when it is full, or the row or the
// message ends. A beat is taken in the cycle the previous wide beat leaves, so it moves one narrow
// beat a cycle; no shifter: each lane is written from the input or kept.
module amp_widen #(
    parameter integer L = 2,  // 64-bit beats side by side on the wide side, at least 2
    parameter integer BPR = 1  // narrow beats of a row of the stream's width
) (
    input  wire          ap_clk,
    input  wire          ap_rst_n,
    input  wire [63:0]   s_TDATA,
    input  wire          s_TVALID,
    output wire          s_TREADY,
    input  wire          s_TLAST,
    output reg [64*L-1:0] m_TDATA,
    output reg           m_TVALID,
    input  wire          m_TREADY,
    output reg           m_TLAST
);
  localparam integer LAST_COL = BPR - 1;
  localparam integer LAST_LANE = L - 1;
  reg [1:0] phase;  // 0: header, 1: state, 2: payload
  reg [15:0] col;  // narrow beat within the row
  reg [15:0] lane;  // where the next beat goes
  wire take = s_TVALID && s_TREADY;
  wire row_end = col == LAST_COL[15:0];
  wire flush = phase != 2'd2 || s_TLAST || row_end || lane == LAST_LANE[15:0];
  integer i;

  assign s_TREADY = !m_TVALID || m_TREADY;

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      phase <= 2'd0;
      col <= 16'd0;
      lane <= 16'd0;
      m_TVALID <= 1'b0;
      m_TLAST <= 1'b0;
    end else begin
      if (m_TVALID && m_TREADY) m_TVALID <= 1'b0;
      if (take) begin
        for (i = 0; i < L; i = i + 1)
          if (lane == i[15:0]) m_TDATA[64*i +: 64] <= s_TDATA;
          else if (lane == 16'd0) m_TDATA[64*i +: 64] <= 64'd0;  // a wide beat starts: zero above
        m_TLAST <= s_TLAST;
        if (flush) begin
          m_TVALID <= 1'b1;
          lane <= 16'd0;
        end else begin
          lane <= lane + 16'd1;
        end
        if (phase != 2'd2) phase <= phase + 1'b1;
        else col <= row_end ? 16'd0 : col + 16'd1;
        if (s_TLAST) begin
          phase <= 2'd0;
          col <= 16'd0;
        end
      end
    end
  end
endmodule

// 64 L -> 64: each wide beat sent as its narrow beats, one a cycle: the header's and the state's
// low 64 bits, a payload beat's first L (or, at a row's end, the row's last) beats.
module amp_narrow #(
    parameter integer L = 2,  // 64-bit beats side by side on the wide side, at least 2
    parameter integer BPR = 1  // narrow beats of a row of the stream's width
) (
    input  wire          ap_clk,
    input  wire          ap_rst_n,
    input  wire [64*L-1:0] s_TDATA,
    input  wire          s_TVALID,
    output wire          s_TREADY,
    input  wire          s_TLAST,
    output wire [63:0]   m_TDATA,
    output wire          m_TVALID,
    input  wire          m_TREADY,
    output wire          m_TLAST
);
  localparam integer ROW = BPR;
  localparam integer LANES = L;
  reg [1:0] phase;  // of the next wide beat: 0 header, 1 state, 2 payload
  reg [15:0] col;  // narrow beats of the row before the next wide beat
  reg [64*L-1:0] held;  // the wide beat being sent
  reg have, held_last;
  reg [15:0] index, count;  // the narrow beat being sent, and how many the wide beat holds
  wire [15:0] left = ROW[15:0] - col;  // the row's narrow beats still to come
  wire [15:0] holds = phase != 2'd2 ? 16'd1 : (left < LANES[15:0] ? left : LANES[15:0]);
  wire done = have && m_TREADY && index == count - 16'd1;  // its last narrow beat leaves
  wire take = s_TVALID && s_TREADY;

  assign s_TREADY = !have || done;
  assign m_TVALID = have;
  assign m_TDATA = held[64 * index +: 64];
  assign m_TLAST = held_last && index == count - 16'd1;

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      phase <= 2'd0;
      col <= 16'd0;
      have <= 1'b0;
      held_last <= 1'b0;
      index <= 16'd0;
      count <= 16'd0;
    end else begin
      if (have && m_TREADY && !done) index <= index + 16'd1;
      if (take) begin
        held <= s_TDATA;
        held_last <= s_TLAST;
        have <= 1'b1;
        index <= 16'd0;
        count <= holds;
        if (phase != 2'd2) phase <= phase + 1'b1;
        else col <= col + holds == ROW[15:0] ? 16'd0 : col + holds;
        if (s_TLAST) begin
          phase <= 2'd0;
          col <= 16'd0;
        end
      end else if (done) begin
        have <= 1'b0;
      end
    end
  end
endmodule
