// amp_fifo: the AXI-stream FIFO on every stream between two kernels of amp_top (one per
// stream of amp_hls.design.DeviceDesign.wiring). Hand-written and shared by every generated design.
//
// 2**AW entries of {TLAST, TDATA} in an amp_ram (written and read synchronously, so it maps to
// block, distributed or ultra RAM), whose read register is the output register:
// first-word-fall-through, one beat per cycle in and out, capacity 2**AW + 1 beats. s_TREADY
// depends on registers only, so no combinational path runs from the reader's TREADY back to the
// writer.
module amp_fifo #(
    parameter integer AW = 4,  // address bits: 2**AW memory entries; at least 1
    parameter integer W = 64  // TDATA bits: 64, or 64 times a row-wise kernel's lanes (amp_hls/wire.py, Lanes)
) (
    input  wire        ap_clk,
    input  wire        ap_rst_n,
    input  wire [W-1:0] s_TDATA,
    input  wire        s_TVALID,
    output wire        s_TREADY,
    input  wire        s_TLAST,
    output wire [W-1:0] m_TDATA,
    output wire        m_TVALID,
    input  wire        m_TREADY,
    output wire        m_TLAST
);
  reg [AW:0] wp, rp;  // one bit more than the address tells full from empty
  wire [W:0] head;  // the output register (amp_ram's read register)
  reg head_valid;

  wire empty = wp == rp;
  wire full = wp[AW] != rp[AW] && wp[AW-1:0] == rp[AW-1:0];
  wire push = s_TVALID && !full;
  wire pop = !empty && (!head_valid || m_TREADY);  // refill the output register

  assign s_TREADY = !full;
  assign m_TDATA = head[W-1:0];
  assign m_TLAST = head[W];
  assign m_TVALID = head_valid;

  // the entries: an amp_ram (block RAM, LUT-RAM, or URAM on a board with it, by amp_ram's rule),
  // read into the output register as it is refilled
  amp_ram #(.W(W + 1), .AW(AW)) entries (
      .ap_clk(ap_clk), .we(push), .waddr(wp[AW-1:0]), .wdata({s_TLAST, s_TDATA}),
      .re(pop), .raddr(rp[AW-1:0]), .rdata(head));

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      wp <= {(AW + 1){1'b0}};
      rp <= {(AW + 1){1'b0}};
      head_valid <= 1'b0;
    end else begin
      if (push) wp <= wp + 1'b1;
      if (pop) rp <= rp + 1'b1;
      if (pop) head_valid <= 1'b1;
      else if (m_TREADY) head_valid <= 1'b0;
    end
  end
endmodule
