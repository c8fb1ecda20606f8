// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// Payment channels holding ERC-20 deposits. The payee settles with the payer's EIP-712 signature over
/// Voucher(bytes32 channelId, uint128 cumulativeAmount): the delta over what was already settled is paid out.
/// A lower or equal amount settles nothing. The payer can request a close and withdraw the rest after a grace
/// period; the payee can still settle inside it.
contract Escrow is EIP712 {
    using SafeERC20 for IERC20;

    struct Channel {
        address payer;
        address payee;
        address token;
        uint128 deposit;
        uint128 settled;
        uint64 closeRequestedAt;
        bool closed;
    }

    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 cumulativeAmount)");
    uint64 public immutable closeGrace;
    mapping(bytes32 => Channel) public channels;

    event ChannelOpened(bytes32 indexed channelId, address indexed payer, address indexed payee, address token, uint128 deposit);
    event Deposited(bytes32 indexed channelId, uint128 amount, uint128 deposit);
    event Settled(bytes32 indexed channelId, uint128 cumulativeAmount, uint128 paid);
    event CloseRequested(bytes32 indexed channelId, uint64 at);
    event Withdrawn(bytes32 indexed channelId, uint128 amount);

    error UnknownChannel();
    error ChannelExists();
    error ChannelClosed();
    error NotPayer();
    error BadSigner();
    error OverDeposit();
    error GracePending();
    error CloseNotRequested();

    constructor(uint64 grace) EIP712("node-svc escrow", "1") {
        closeGrace = grace;
    }

    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    function open(bytes32 channelId, address payee, address token, uint128 amount) external {
        if (channels[channelId].payer != address(0)) revert ChannelExists();
        channels[channelId] = Channel(msg.sender, payee, token, amount, 0, 0, false);
        IERC20(token).safeTransferFrom(msg.sender, address(this), amount);
        emit ChannelOpened(channelId, msg.sender, payee, token, amount);
    }

    function deposit(bytes32 channelId, uint128 amount) external {
        Channel storage c = channels[channelId];
        if (c.payer == address(0)) revert UnknownChannel();
        if (msg.sender != c.payer) revert NotPayer();
        if (c.closed) revert ChannelClosed();
        c.deposit += amount;
        IERC20(c.token).safeTransferFrom(msg.sender, address(this), amount);
        emit Deposited(channelId, amount, c.deposit);
    }

    /// Anyone may submit; the money only ever goes to the channel's payee. ECDSA.recover refuses high-s signatures.
    function settle(bytes32 channelId, uint128 cumulativeAmount, bytes calldata signature) external returns (uint128 paid) {
        Channel storage c = channels[channelId];
        if (c.payer == address(0)) revert UnknownChannel();
        if (c.closed) revert ChannelClosed();
        bytes32 digest = _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, cumulativeAmount)));
        if (ECDSA.recover(digest, signature) != c.payer) revert BadSigner();
        if (cumulativeAmount <= c.settled) return 0;
        if (cumulativeAmount > c.deposit) revert OverDeposit();
        paid = cumulativeAmount - c.settled;
        c.settled = cumulativeAmount;
        IERC20(c.token).safeTransfer(c.payee, paid);
        emit Settled(channelId, cumulativeAmount, paid);
    }

    function requestClose(bytes32 channelId) external {
        Channel storage c = channels[channelId];
        if (c.payer == address(0)) revert UnknownChannel();
        if (msg.sender != c.payer) revert NotPayer();
        if (c.closed) revert ChannelClosed();
        if (c.closeRequestedAt == 0) {
            c.closeRequestedAt = uint64(block.timestamp);
            emit CloseRequested(channelId, c.closeRequestedAt);
        }
    }

    function withdraw(bytes32 channelId) external {
        Channel storage c = channels[channelId];
        if (c.payer == address(0)) revert UnknownChannel();
        if (msg.sender != c.payer) revert NotPayer();
        if (c.closed) revert ChannelClosed();
        if (c.closeRequestedAt == 0) revert CloseNotRequested();
        if (block.timestamp < c.closeRequestedAt + closeGrace) revert GracePending();
        c.closed = true;
        uint128 rest = c.deposit - c.settled;
        IERC20(c.token).safeTransfer(c.payer, rest);
        emit Withdrawn(channelId, rest);
    }
}
