// amp_pack: host_out packets for the AXI DMA's S2MM channel (the rtl flow's amp_board).
// Hand-written and shared by every generated design.
//
// amp_top ends every message with TLAST; an S2MM transfer ends at TLAST, so passed on as it is,
// every message would cost the host one receive. amp_pack keeps TLAST only where a packet
// should end. It holds each message's last beat back (not offered) until it knows: the next beat
// arrives and the packet is below CLOSE beats -- the packet goes on (TLAST 0) -- or the device
// has been quiet for IDLE cycles while the DMA was ready to take the packet (a DMA not yet
// re-armed lets packets grow), or the packet has reached CLOSE beats -- the packet ends there
// (TLAST 1). A packet that reaches LIMIT beats inside a message (a message
// longer than the host's receive buffer) ends there too: LIMIT is the receive buffer in beats,
// CLOSE that less the longest message, so every packet fits the buffer and ends on a message
// boundary unless a single message cannot. Between messages one cycle is spent deciding.
module amp_pack #(
    parameter integer LIMIT = 8192,  // beats of the host's receive buffer
    parameter integer CLOSE = 4096,  // a packet this long ends at the next message boundary
    parameter integer IDLE = 16  // quiet cycles after a message that end the packet
) (
    input  wire        ap_clk,
    input  wire        ap_rst_n,
    input  wire [63:0] s_TDATA,
    input  wire        s_TVALID,
    output wire        s_TREADY,
    input  wire        s_TLAST,
    output wire [63:0] m_TDATA,
    output wire        m_TVALID,
    input  wire        m_TREADY,
    output wire        m_TLAST
);
  localparam [1:0] EMPTY = 2'd0, FULL = 2'd1, HOLD = 2'd2;
  reg [1:0] st;
  reg [63:0] r_data;
  reg r_last;
  reg [31:0] count;  // beats of the current packet, the register's included
  reg [31:0] idle;

  assign m_TDATA = r_data;
  assign m_TLAST = r_last;
  assign m_TVALID = st == FULL;
  assign s_TREADY = st == EMPTY || (st == FULL && m_TREADY);
  wire s_take = s_TVALID && s_TREADY;
  wire m_take = m_TVALID && m_TREADY;
  wire [31:0] next_count = (m_take && r_last) || st == EMPTY && count == 32'd0 ? 32'd1 : count + 32'd1;

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      st <= EMPTY;
      r_last <= 1'b0;
      count <= 32'd0;
      idle <= 32'd0;
    end else begin
      case (st)
        HOLD:
          if (count >= CLOSE || idle >= IDLE - 1) begin
            r_last <= 1'b1;
            st <= FULL;
          end else if (s_TVALID) begin
            r_last <= 1'b0;
            st <= FULL;
          end else if (m_TREADY) begin  // quiet while the DMA could take the packet: end it
            idle <= idle + 32'd1;
          end
        default:  // EMPTY, FULL
          if (s_take) begin
            r_data <= s_TDATA;
            count <= next_count;
            idle <= 32'd0;
            if (s_TLAST) begin
              st <= HOLD;
            end else begin
              r_last <= next_count >= LIMIT;
              st <= FULL;
            end
          end else if (m_take) begin
            st <= EMPTY;
            if (r_last) count <= 32'd0;
          end
      endcase
    end
  end
endmodule
